package locktable

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/recordlock/recordlock/internal/spans"
	"pgregory.net/rapid"
)

// The tree of ranges answers Covers, Containing, Meeting and Encloses as a scan of every item does,
// whatever ranges come and go: items over a small key space, so that they overlap, share starts
// and ends, and some have no end.
func TestRangeTreeAgreesWithAScan(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var tree rangeTree
		var items []*rangeItem
		var ids uint64
		keyGen := rapid.SampledFrom([]string{"", "a", "b", "bb", "c", "d", "e", "record/1", "record/10", "record/100000001", "record/100000001\x00", "record/1000000010", "record/100000002", "record/2", "b\x00"})
		newItem := func() *rangeItem {
			start := keyGen.Draw(rt, "start")
			var end []byte
			if e := keyGen.Draw(rt, "end"); e > start {
				end = []byte(e)
			}
			h := &Claim{}
			h.setKey([]byte(start))
			h.cold = &Cold{span: &span{Span: spans.Span{Start: h.key(), End: end}}}
			it := &h.cold.span.item
			ids++
			it.Value = h
			it.ready(ids)
			return it
		}
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			if len(items) > 0 && rapid.Bool().Draw(rt, "remove") {
				i := rapid.IntRange(0, len(items)-1).Draw(rt, "which")
				tree.Remove(&items[i].Node)
				items = slices.Delete(items, i, i+1)
			} else {
				it := newItem()
				tree.Insert(&it.Node)
				items = append(items, it)
			}
			if tree.Len() != len(items) {
				rt.Fatalf("tree holds %d items, not %d", tree.Len(), len(items))
			}
			key := []byte(keyGen.Draw(rt, "key"))
			var want []*rangeItem
			for _, it := range items {
				if spanContains(it.start(), it.end(), key) {
					want = append(want, it)
				}
			}
			if got := tree.Covers(key); got != (len(want) > 0) {
				rt.Fatalf("Covers(%q) = %v, but %d items hold it", key, got, len(want))
			}
			var got []*rangeItem
			tree.Containing(key, func(y *Claim) bool { got = append(got, itemOf(y)); return true })
			sameItems(rt, fmt.Sprintf("containing(%q)", key), got, want)

			start, end := key, []byte(nil)
			if e := keyGen.Draw(rt, "spanEnd"); e > string(start) {
				end = []byte(e)
			}
			want = want[:0]
			for _, it := range items {
				if spansMeet(it.start(), it.end(), start, end) {
					want = append(want, it)
				}
			}
			got = got[:0]
			tree.Meeting(start, end, func(y *Claim) bool { got = append(got, itemOf(y)); return true })
			sameItems(rt, fmt.Sprintf("meeting(%q, %q)", start, end), got, want)

			holds := false
			for _, it := range items {
				inside := it.end() == nil || end != nil && bytes.Compare(end, it.end()) <= 0
				holds = holds || bytes.Compare(it.start(), start) <= 0 && inside
			}
			if got := tree.Encloses(start, end); got != holds {
				rt.Fatalf("Encloses(%q, %q) = %v, but a scan says %v", start, end, got, holds)
			}
		}
	})
}

func sameItems(rt *rapid.T, what string, got, want []*rangeItem) {
	byID := func(a, b *rangeItem) int { return int(a.ID()) - int(b.ID()) }
	slices.SortFunc(got, byID)
	slices.SortFunc(want, byID)
	if !slices.Equal(got, want) {
		rt.Fatalf("%s found %d items, a scan %d", what, len(got), len(want))
	}
}
