//go:build invariants

package spans

import (
	"bytes"
	"fmt"
	"math/bits"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Tests of cost bounds, counted in steps that the table counts only in a build with the tag
// invariants (internal/invariants): they are built with it alone.

// Finding the one span that holds a key among m disjoint ones costs O(log m) steps.
func TestContainingCostsLogM(t *testing.T) {
	perFind := map[int]float64{}
	for _, m := range []int{1000, 8000} {
		var x Index[int]
		for i := range m {
			k := fmt.Appendf(nil, "r%06d", i)
			x.Insert(k, append(bytes.Clone(k), 0xff), i)
		}
		const finds = 1000
		for i := range finds {
			found := 0
			x.Containing(fmt.Appendf(nil, "r%06d/x", i*m/finds), func(int) bool { found++; return true })
			assert.Equal(t, 1, found)
		}
		perFind[m] = float64(x.Steps()) / finds
	}
	t.Logf("steps per find: %v", perFind)
	assert.LessOrEqual(t, perFind[8000], 4*float64(bits.Len(8000)), "a few paths down a tree of 8,000")
	assert.LessOrEqual(t, perFind[8000], 1.6*perFind[1000], "the steps grow like log m: m grew 8×")
}
