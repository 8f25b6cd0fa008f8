package locktable

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
