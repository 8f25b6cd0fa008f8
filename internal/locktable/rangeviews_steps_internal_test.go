//go:build invariants

package locktable

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Tests of cost bounds, counted in steps that the table counts only in a build with the tag
// invariants (internal/invariants): they are built with it alone.

// Locks() and Waits() (VisitHolders, VisitWaits) cost O((s + q) log q) for s sharers of ranges
// and of a key inside them, with q range requests queued over both, whether the ranges are of one
// span or of s: the queued requests are read once per view into an index (queuedindex.go), and
// those over a span or key are counted once for all its holders, not walked once per holder, nor
// once per span.
func TestLocksCostsLinearInRangeSharersAndQueued(t *testing.T) {
	for _, spans := range sharedSpans {
		t.Run(spans.name, func(t *testing.T) {
			cost := map[int]uint64{}
			for _, n := range []int{100, 200} {
				x := newRangeSharersAndQueued(t, n, n, spans.start)
				tab := x.l.tab
				holders := 0
				for i := range ShardCount {
					tab.VisitHolders(i, func(_ Snapshot, waiters int) {
						holders++
						assert.Equal(t, n, waiters, "every holder is waited for by the %d exclusive ranges", n)
					})
				}
				assert.Equal(t, 2*n, holders)
				before := tab.Visited()
				holders, waits := visitAll(tab)
				cost[n] = tab.Visited() - before
				// VisitHolders lists both kinds of holder; VisitWaits the range locks (it lists the
				// holders of the keys with a request of their own queued).
				assert.Equal(t, 3*n, holders)
				assert.Equal(t, n, waits)
				x.release(t, n)
			}
			t.Logf("holders, requests and search probes read by the views, s = q = n: %v", cost)
			ratio := float64(cost[200]) / float64(cost[100])
			assert.Less(t, ratio, 2.5, "doubling s and q must about double the cost, not quadruple it")
		})
	}
}
