package spans

import (
	"bytes"
	"fmt"
	"math/bits"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"pgregory.net/rapid"
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
				want := slices.ContainsFunc(v.spans, func(s modelSpan) bool { return s.holds(key) })
				assert.Equal(rt, want, v.v.Covers(key), "Covers(%q) of a version of %d spans", key, len(v.spans))
			}
		}
	})
}

// Covers follows one path down: its steps grow like log n.
func TestCoversCostsLogN(t *testing.T) {
	perFind := map[int]float64{}
	for _, m := range []int{1000, 8000} {
		var v Version
		for i := range m {
			k := fmt.Appendf(nil, "r%06d", i)
			end := append(bytes.Clone(k), 0xff)
			v = v.With(&Span{Start: k, End: end}, uint64(i))
		}
		const finds = 1000
		steps := 0
		for i := range finds {
			for _, k := range []string{"/x", "\xff"} { // inside a span, between two
				key := fmt.Appendf(nil, "r%06d%s", i*m/finds, k)
				found, n := covers(v.root, key)
				assert.Equal(t, k == "/x", found, "Covers(%q)", key)
				assert.Equal(t, found, v.Covers(key))
				steps += int(n)
			}
		}
		perFind[m] = float64(steps) / (2 * finds)
	}
	t.Logf("steps per search: %v", perFind)
	assert.LessOrEqual(t, perFind[8000], 2*float64(bits.Len(8000)), "one path down a tree of 8,000")
	assert.LessOrEqual(t, perFind[8000], 1.6*perFind[1000], "the steps grow like log n: n grew 8×")
}
