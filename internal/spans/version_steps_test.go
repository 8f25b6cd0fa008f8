//go:build invariants

package spans

import (
	"bytes"
	"fmt"
	"math/bits"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/invariants"
)

// Tests of cost bounds, counted in steps that the table counts only in a build with the tag
// invariants (internal/invariants): they are built with it alone.

// Covers follows one path down: its steps grow like log n, on spans that meet (covers) and on
// spans apart (coversApart), which these are.
func TestCoversCostsLogN(t *testing.T) {
	perFind, perFindApart := map[int]float64{}, map[int]float64{}
	for _, m := range []int{1000, 8000} {
		var v Version
		for i := range m {
			k := fmt.Appendf(nil, "r%06d", i)
			end := append(bytes.Clone(k), 0xff)
			v = v.With(&Span{Start: k, End: end}, uint64(i))
		}
		require.False(t, v.overlapping)
		const finds = 1000
		steps, stepsApart := 0, 0
		for i := range finds {
			for _, k := range []string{"/x", "\xff"} { // inside a span, between two
				key := fmt.Appendf(nil, "r%06d%s", i*m/finds, k)
				var n, nApart invariants.Counter
				found := covers(v.root, key, &n)
				assert.Equal(t, k == "/x", found, "Covers(%q)", key)
				assert.Equal(t, found, coversApart(v.root, key, &nApart))
				assert.Equal(t, found, v.Covers(key))
				steps += int(n.Load())
				stepsApart += int(nApart.Load())
			}
		}
		perFind[m] = float64(steps) / (2 * finds)
		perFindApart[m] = float64(stepsApart) / (2 * finds)
	}
	t.Logf("steps per search: %v; apart: %v", perFind, perFindApart)
	for _, per := range []map[int]float64{perFind, perFindApart} {
		assert.LessOrEqual(t, per[8000], 2*float64(bits.Len(8000)), "one path down a tree of 8,000")
		assert.LessOrEqual(t, per[8000], 1.6*per[1000], "the steps grow like log n: n grew 8×")
	}
}
