package locktable

import (
	"bytes"
	"slices"
	"testing"

	"github.com/recordlock/recordlock/internal/spans"
	"pgregory.net/rapid"
)

// The cover, a tree that is copied rather than changed, answers Covers as a scan of its spans
// does, and every earlier version of it still answers as it did: a key request may be reading
// one while the home shard publishes the next.
func TestCoverAgreesWithAScan(t *testing.T) {
	type version struct {
		spans spans.Version
		all   []*retiredSpan
	}
	rapid.Check(t, func(rt *rapid.T) {
		keyGen := rapid.SampledFrom([]string{"", "a", "b", "bb", "c", "d", "record/1", "record/10", "record/100000001", "record/100000001\x00", "record/100000002", "b\x00"})
		var cur version
		var versions []version
		var ids uint64
		check := func(v version, key []byte) {
			want := false
			for _, r := range v.all {
				want = want || spanContains(r.Start, r.End, key)
			}
			if got := v.spans.Covers(key); got != want {
				rt.Fatalf("Covers(%q) = %v, but a scan of %d spans says %v", key, got, len(v.all), want)
			}
		}
		for range rapid.IntRange(1, 40).Draw(rt, "steps") {
			if len(cur.all) > 0 && rapid.Bool().Draw(rt, "remove") {
				i := rapid.IntRange(0, len(cur.all)-1).Draw(rt, "which")
				cur.spans = cur.spans.Without(&cur.all[i].Span, cur.all[i].id)
				cur.all = slices.Delete(slices.Clone(cur.all), i, i+1)
			} else {
				start := []byte(keyGen.Draw(rt, "start"))
				var end []byte
				if e := keyGen.Draw(rt, "end"); bytes.Compare([]byte(e), start) > 0 {
					end = []byte(e)
				}
				ids++
				r := &retiredSpan{Span: spans.Span{Start: start, End: end}, id: ids}
				cur.spans = cur.spans.With(&r.Span, r.id)
				cur.all = append(slices.Clone(cur.all), r)
			}
			versions = append(versions, cur)
			key := []byte(keyGen.Draw(rt, "key"))
			for _, v := range versions {
				check(v, key)
			}
		}
	})
}
