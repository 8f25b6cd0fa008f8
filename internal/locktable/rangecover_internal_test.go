package locktable

import (
	"bytes"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// The cover, a tree that is copied rather than changed, answers stabs as a scan of its spans
// does, and every earlier version of it still answers as it did: a key request may be reading
// one while the home shard publishes the next.
func TestCoverAgreesWithAScan(t *testing.T) {
	type version struct {
		root  *coverNode
		spans []*retiredSpan
	}
	rapid.Check(t, func(rt *rapid.T) {
		keyGen := rapid.SampledFrom([]string{"", "a", "b", "bb", "c", "d", "record/1", "record/10", "record/100000001", "record/100000001\x00", "record/100000002", "b\x00"})
		var root *coverNode
		var spans []*retiredSpan
		var versions []version
		var ids uint64
		check := func(v version, key []byte) {
			want := false
			for _, r := range v.spans {
				want = want || spanContains(r.start, r.end, key)
			}
			if got := v.root.stabs(key); got != want {
				rt.Fatalf("stabs(%q) = %v, but a scan of %d spans says %v", key, got, len(v.spans), want)
			}
		}
		for range rapid.IntRange(1, 40).Draw(rt, "steps") {
			if len(spans) > 0 && rapid.Bool().Draw(rt, "remove") {
				i := rapid.IntRange(0, len(spans)-1).Draw(rt, "which")
				root = coverWithout(root, spans[i].start, spans[i].id)
				spans = slices.Delete(slices.Clone(spans), i, i+1)
			} else {
				start := []byte(keyGen.Draw(rt, "start"))
				var end []byte
				if e := keyGen.Draw(rt, "end"); bytes.Compare([]byte(e), start) > 0 {
					end = []byte(e)
				}
				ids++
				r := &retiredSpan{start: start, end: end, id: ids}
				root = coverWith(root, r.start, &r.end, r.id)
				spans = append(slices.Clone(spans), r)
			}
			versions = append(versions, version{root, spans})
			key := []byte(keyGen.Draw(rt, "key"))
			for _, v := range versions {
				check(v, key)
			}
		}
	})
}
