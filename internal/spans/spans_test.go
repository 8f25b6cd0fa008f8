package spans

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
	"pgregory.net/rapid"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// modelSpan is a span of the naive model the trees are checked against: a slice of every span.
type modelSpan struct {
	start, end []byte
	id         uint64
}

// span is s as a tree's node points at it.
func (s modelSpan) span() *Span { return &Span{Start: s.start, End: s.end} }

func (s modelSpan) holds(k []byte) bool {
	return bytes.Compare(s.start, k) <= 0 && (s.end == nil || bytes.Compare(k, s.end) < 0)
}

func (s modelSpan) meets(start, end []byte) bool {
	return (end == nil || bytes.Compare(s.start, end) < 0) && (s.end == nil || bytes.Compare(start, s.end) < 0)
}

// inOrder sorts spans as a tree orders them: by start, then id.
func inOrder(spans []modelSpan) []modelSpan {
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b modelSpan) int {
		if c := bytes.Compare(a.start, b.start); c != 0 {
			return c
		}
		return int(a.id) - int(b.id)
	})
	return spans
}

// keyGen draws keys from a small set, so that spans overlap, share starts and ends, and some keys
// share long prefixes (Compare's eight-byte steps).
var keyGen = rapid.SampledFrom([]string{"", "a", "b", "bb", "b\x00", "c", "d", "e", "record/1", "record/10",
	"record/100000001", "record/100000001\x00", "record/1000000010", "record/100000002", "record/2"})

// drawSpan draws a span; its end, when it is not after its start, makes it unbounded.
func drawSpan(rt *rapid.T, id uint64) modelSpan {
	s := modelSpan{start: []byte(keyGen.Draw(rt, "start")), id: id}
	if e := []byte(keyGen.Draw(rt, "end")); bytes.Compare(e, s.start) > 0 {
		s.end = e
	}
	return s
}

// checkShape fails rt unless the tree n is a treap of exactly want (in order) whose every node's
// largest end is right.
func checkShape[V any](rt *rapid.T, n *Node[V], want []modelSpan) {
	var got []modelSpan
	var walk func(n *Node[V]) []byte // the largest end in n's subtree
	walk = func(n *Node[V]) []byte {
		if n.left != nil && priority(n.left.id) > priority(n.id) || n.right != nil && priority(n.right.id) > priority(n.id) {
			rt.Fatalf("node %d has a child of higher priority", n.id)
		}
		maxEnd := n.span.End
		if n.left != nil {
			maxEnd = laterEnd(maxEnd, walk(n.left))
		}
		got = append(got, modelSpan{start: n.span.Start, end: n.span.End, id: n.id})
		if n.right != nil {
			maxEnd = laterEnd(maxEnd, walk(n.right))
		}
		if !sameEnd(*n.maxEnd, maxEnd) {
			rt.Fatalf("node %d: largest end %q, not %q", n.id, *n.maxEnd, maxEnd)
		}
		return maxEnd
	}
	if n != nil {
		walk(n)
	}
	if len(got) != len(want) {
		rt.Fatalf("tree holds %d spans, not %d", len(got), len(want))
	}
	for i := range got {
		if got[i].id != want[i].id || !bytes.Equal(got[i].start, want[i].start) || !sameEnd(got[i].end, want[i].end) {
			rt.Fatalf("span %d in order is %d [%q, %q), not %d [%q, %q)", i, got[i].id, got[i].start, got[i].end, want[i].id, want[i].start, want[i].end)
		}
	}
}

func laterEnd(a, b []byte) []byte {
	if a == nil || b == nil {
		return nil
	}
	if bytes.Compare(a, b) < 0 {
		return b
	}
	return a
}

func sameEnd(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

// A tree's shape depends only on its spans, not on the order they came and went, whether it was
// changed in place or copied: the steps a search counts are the same every run.
func TestShapeIsTheSpans(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var all []modelSpan
		for id := range uint64(rapid.IntRange(1, 30).Draw(rt, "n")) {
			all = append(all, drawSpan(rt, id))
		}
		extra := drawSpan(rt, uint64(len(all)))
		shuffled := slices.Clone(all)
		for i := len(shuffled) - 1; i > 0; i-- {
			j := rapid.IntRange(0, i).Draw(rt, "swap")
			shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
		}
		var inPlace Tree[struct{}]
		for i := range all {
			n := &Node[struct{}]{}
			n.Init(struct{}{}, all[i].span(), all[i].id)
			inPlace.Insert(n)
		}
		var v Version
		for i := range shuffled {
			v = v.With(shuffled[i].span(), shuffled[i].id)
			if i == len(shuffled)/2 {
				v = v.With(extra.span(), extra.id)
			}
		}
		v = v.Without(extra.span(), extra.id)
		assert.Equal(rt, shape(inPlace.root), shape(v.root), "copied in another order, one more came and went")
	})
}

// shape writes the tree n as nested (id left right), "." for no node.
func shape[V any](n *Node[V]) string {
	if n == nil {
		return "."
	}
	return fmt.Sprintf("(%d %s %s)", n.id, shape(n.left), shape(n.right))
}

// Compare orders keys as bytes.Compare does, across the eight-byte steps and the tail.
func TestCompareIsBytesCompare(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		gen := rapid.SliceOfN(rapid.ByteRange(0xfe, 0xff), 0, 20) // two values: long shared prefixes
		a, b := gen.Draw(rt, "a"), gen.Draw(rt, "b")
		if rapid.Bool().Draw(rt, "prefix") {
			b = append(a[:len(a):len(a)], b...)
		}
		if got, want := Compare(a, b), bytes.Compare(a, b); got != want {
			rt.Fatalf("Compare(%x, %x) = %d, bytes.Compare %d", a, b, got, want)
		}
	})
}
