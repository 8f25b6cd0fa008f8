package spans

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"pgregory.net/rapid"

	"github.com/recordlock/recordlock/internal/invariants"
)

// Every Version answers as a scan of its own spans does and keeps its shape, however many
// versions are made from it and from each other later: a reader of one never sees the next.
func TestVersionsStayAsTheyWere(t *testing.T) {
	type version struct {
		v     Version
		spans []modelSpan
	}
	rapid.Check(t, func(rt *rapid.T) {
		versions := []version{{}}
		for id := range uint64(rapid.IntRange(1, 40).Draw(rt, "steps")) {
			from := versions[rapid.IntRange(0, len(versions)-1).Draw(rt, "from")]
			next := version{spans: slices.Clone(from.spans)}
			if len(from.spans) > 0 && rapid.Bool().Draw(rt, "without") {
				i := rapid.IntRange(0, len(from.spans)-1).Draw(rt, "which")
				next.v = from.v.Without(from.spans[i].span(), from.spans[i].id)
				next.spans = slices.Delete(next.spans, i, i+1)
			} else {
				s := drawSpan(rt, id)
				next.v = from.v.With(s.span(), s.id)
				next.spans = append(next.spans, s)
			}
			versions = append(versions, next)
			key := []byte(keyGen.Draw(rt, "key"))
			for _, v := range versions {
				checkShape(rt, v.v.root, inOrder(v.spans))
				assert.Equal(rt, len(v.spans) == 0, v.v.Empty())
				if !v.v.overlapping {
					assert.False(rt, anyMeet(v.spans), "a version of spans that meet is marked as spans apart")
				}
				want := slices.ContainsFunc(v.spans, func(s modelSpan) bool { return s.holds(key) })
				assert.Equal(rt, want, v.v.Covers(key), "Covers(%q) of a version of %d spans", key, len(v.spans))
			}
		}
	})
}

// anyMeet reports whether two of spans share a key.
func anyMeet(spans []modelSpan) bool {
	for i, a := range spans {
		for _, b := range spans[i+1:] {
			if a.meets(b.start, b.end) {
				return true
			}
		}
	}
	return false
}

// A version of spans that share no key answers Covers from the one span that starts last at or
// before the key; a span that meets the one before it or the one after it marks the version
// overlapping, and it stays so until it is empty. A span that ends where the next starts meets
// nothing.
func TestVersionOfSpansApart(t *testing.T) {
	span := func(start, end string) *Span {
		s := &Span{Start: []byte(start)}
		if end != "" {
			s.End = []byte(end)
		}
		return s
	}
	bc, de, ab := span("b", "c"), span("d", "e"), span("a", "b")
	apart := Version{}.With(bc, 1).With(de, 2).With(ab, 3)
	assert.False(t, apart.overlapping, "[a,b) [b,c) [d,e)")
	for key, want := range map[string]bool{"a": true, "b": true, "b\xff": true, "c": false, "c\xff": false, "d": true, "e": false, "": false} {
		assert.Equal(t, want, apart.Covers([]byte(key)), "Covers(%q)", key)
	}

	// [b\x00, b\x01) meets the span before it, [b,c); [c, d\x00) the one after it, [d,e).
	for _, s := range []*Span{span("b\x00", "b\x01"), span("c", "d\x00"), span("b", "")} {
		v := apart.With(s, 4)
		assert.True(t, v.overlapping, "with [%q,%q)", s.Start, s.End)
		assert.True(t, v.Covers(s.Start), "Covers(%q) with [%q,%q)", s.Start, s.Start, s.End)
		v = v.Without(s, 4)
		assert.True(t, v.overlapping, "still marked once [%q,%q) left", s.Start, s.End)
		v = v.Without(bc, 1).Without(de, 2).Without(ab, 3)
		assert.True(t, v.Empty())
		assert.False(t, v.overlapping, "an empty version has no spans that meet")
	}

	// Read as spans apart, [a,∞) and [b,c) would miss d, which only the first holds: the mark is
	// what keeps Covers right.
	over := Version{}.With(span("b", "c"), 1).With(span("a", ""), 2)
	assert.True(t, over.Covers([]byte("d")))
	var n invariants.Counter
	assert.False(t, coversApart(over.root, []byte("d"), &n), "the last span to start before d ends before it")
}

// Versions of spans drawn on a grid of 20 keys, so that they are often apart, with unbounded ends,
// equal starts and numbers in any order, spans coming and going: Covers agrees with a scan of
// them, at every key of the grid and just after it, and no version whose spans meet is marked as
// spans apart.
func TestVersionsOfSpansOftenApart(t *testing.T) {
	gridKey := func(i int) []byte { return fmt.Appendf(nil, "k%02d", i) }
	rapid.Check(t, func(rt *rapid.T) {
		var v Version
		var spans []modelSpan
		used := map[uint64]bool{}
		for range rapid.IntRange(1, 30).Draw(rt, "steps") {
			if len(spans) > 0 && rapid.IntRange(0, 3).Draw(rt, "without") == 0 {
				i := rapid.IntRange(0, len(spans)-1).Draw(rt, "which")
				v = v.Without(spans[i].span(), spans[i].id)
				spans = slices.Delete(spans, i, i+1)
			} else {
				id := rapid.Uint64Range(0, 200).Filter(func(id uint64) bool { return !used[id] }).Draw(rt, "id")
				used[id] = true
				start := rapid.IntRange(0, 19).Draw(rt, "start")
				s := modelSpan{start: gridKey(start), id: id}
				if end := rapid.IntRange(start, 20).Draw(rt, "end"); end > start {
					s.end = gridKey(end) // else unbounded
				}
				v = v.With(s.span(), s.id)
				spans = append(spans, s)
			}
			if !v.overlapping {
				assert.False(rt, anyMeet(spans), "spans that meet marked as spans apart: %v", spans)
			}
			for i := range 21 {
				for _, key := range [][]byte{gridKey(i), append(gridKey(i), 0)} {
					want := slices.ContainsFunc(spans, func(s modelSpan) bool { return s.holds(key) })
					assert.Equal(rt, want, v.Covers(key), "Covers(%q) of %v", key, spans)
				}
			}
		}
	})
}
