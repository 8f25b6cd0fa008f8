//go:build invariants

package locktable

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Tests of cost bounds, counted in steps that the table counts only in a build with the tag
// invariants (internal/invariants): they are built with it alone.

// checkSteps is what every search of l's wait-for graph has read so far: the edges, and the steps
// taken in the column family's range set to find them.
func checkSteps(l *testLocker) uint64 {
	g := &l.tab.graph
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.edgesRead.Load() + g.rangeSteps.Load()
}

// The checks of N Txns queued one by one for one hot range cost O(N) steps in all: each reads the
// holder alone, not every request queued ahead of it (rangeSpace.runHead), whose own edges a
// search then read again per Txn on the path, O(N³) in all.
func TestRangeWaitCheckCostsLinearInQueued(t *testing.T) {
	sizes := []int{50, 100, 200}
	total := map[int]uint64{}
	for _, n := range sizes {
		l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
		r := newHotRange(t, l)
		before := checkSteps(l)
		for range n {
			r.join(t, l)
		}
		total[n] = checkSteps(l) - before
		r.finish(t, l)
	}
	t.Logf("steps of the checks of N Txns queued for one range: %v", total)
	for i := 1; i < len(sizes); i++ {
		ratio := float64(total[sizes[i]]) / float64(total[sizes[i-1]])
		assert.Less(t, ratio, 2.5, "N %d → %d: the steps must about double, not grow like N² or N³", sizes[i-1], sizes[i])
	}
	assert.LessOrEqual(t, total[200], uint64(8*200), "a bounded number of steps per Txn")
}
