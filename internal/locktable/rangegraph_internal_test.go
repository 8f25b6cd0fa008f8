package locktable

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkSteps is what every search of l's wait-for graph has read so far: the edges, and the steps
// taken in the column family's range set to find them.
func checkSteps(l *testLocker) uint64 {
	g := &l.tab.graph
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.edgesRead + g.rangeSteps
}

// hotRange is n Txns queued one by one for the exclusive range [a, z), which a Txn that runs
// holds; each gives the range back as soon as it gets it.
type hotRange struct {
	holder *testTxn
	errs   chan error
	n      int
}

func newHotRange(t testing.TB, l *testLocker) *hotRange {
	holder := l.Begin()
	h, err := l.acquireRange(context.Background(), []byte("a"), []byte("z"), testOptions{}, holder, false)
	require.NoError(t, err)
	holder.claims = append(holder.claims, h)
	return &hotRange{holder: holder, errs: make(chan error, 1024)}
}

// join queues one more Txn for the range and returns once it is in the wait-for graph, with its
// check done.
func (r *hotRange) join(t testing.TB, l *testLocker) {
	t.Helper()
	r.n++
	txn := l.Begin()
	go func() {
		h, err := l.acquireRange(context.Background(), []byte("a"), []byte("z"), testOptions{Timeout: time.Minute}, txn, true)
		if err == nil {
			txn.claims = append(txn.claims, h)
		}
		txn.Rollback()
		r.errs <- err
	}()
	require.Eventually(t, func() bool { return graphWaiting(l) == r.n },
		10*time.Second, 100*time.Microsecond, "waiting for %d Txns in the graph", r.n)
}

// finish lets the queue through and requires that each Txn got the range.
func (r *hotRange) finish(t testing.TB, l *testLocker) {
	t.Helper()
	r.holder.Rollback()
	for range r.n {
		require.NoError(t, <-r.errs)
	}
	assert.True(t, ProbeTableEmpty(l))
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

// BenchmarkRangeWaitCheck times the search for a cycle through the last of n Txns queued one by
// one for one hot range, which a Txn that runs holds.
func BenchmarkRangeWaitCheck(b *testing.B) {
	for _, n := range []int{150, 300, 600} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			l := newTestLocker(b, newTestTable(b), NewManualClock(time.Unix(1, 0)))
			r := newHotRange(b, l)
			for range n {
				r.join(b, l)
			}
			g := &l.tab.graph
			g.mu.Lock()
			var newest *Claim
			for _, h := range g.waiting {
				if newest == nil || h.cold.span.item.w.seq > newest.cold.span.item.w.seq {
					newest = h
				}
			}
			last := newest.owner
			cycles := 0
			for b.Loop() {
				if g.cycleThrough(last) != nil {
					cycles++
				}
			}
			g.mu.Unlock()
			require.Zero(b, cycles, "no cycle runs through a queue behind a holder that runs")
			r.finish(b, l)
		})
	}
}

// BenchmarkRangeQueueOfTxns times queueing n Txns one by one for one hot range, each checked for
// a deadlock as it waits, and letting them through.
func BenchmarkRangeQueueOfTxns(b *testing.B) {
	for _, n := range []int{150, 300, 600} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				l := newTestLocker(b, newTestTable(b), NewManualClock(time.Unix(1, 0)))
				r := newHotRange(b, l)
				for range n {
					r.join(b, l)
				}
				r.finish(b, l)
			}
		})
	}
}
