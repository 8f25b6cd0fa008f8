package locktable

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rangeSharersAndQueued is a table in which s shared range locks of one span [a, z) and s shared
// locks of key m inside it are held, with q exclusive range requests queued over the span, each
// of which gives its range back as soon as it gets it; release lets them through.
type rangeSharersAndQueued struct {
	l       *testLocker
	held    []*Claim
	results chan error
}

func newRangeSharersAndQueued(t testing.TB, s, q int) *rangeSharersAndQueued {
	return newRangeSharersOfSpansAndQueued(t, s, q, func(int) string { return "a" })
}

// newRangeSharersOfSpansAndQueued is newRangeSharersAndQueued with the i-th shared range lock
// over [start(i), z).
func newRangeSharersOfSpansAndQueued(t testing.TB, s, q int, start func(i int) string) *rangeSharersAndQueued {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	x := &rangeSharersAndQueued{l: l, results: make(chan error, q)}
	for i := range s {
		h, err := l.TryLockRange(start(i), "z", testOptions{Shared: true})
		require.NoError(t, err)
		k, err := l.TryLock([]byte("m"), testOptions{Shared: true})
		require.NoError(t, err)
		x.held = append(x.held, h, k)
	}
	for range q {
		go func() {
			h, err := l.acquireRange(context.Background(), []byte("a"), []byte("z"), testOptions{Timeout: time.Minute}, nil, true)
			if err == nil {
				h.Release()
			}
			x.results <- err
		}()
	}
	require.Eventually(t, func() bool { return l.tab.QueuedRanges(0) == q }, 10*time.Second, time.Millisecond)
	return x
}

// release gives back the locks held and waits for every queued request to be granted.
func (x *rangeSharersAndQueued) release(t testing.TB, q int) {
	for _, h := range x.held {
		require.True(t, h.Release())
	}
	for range q {
		require.NoError(t, Await(t, x.results, "a queued range request"))
	}
	assert.True(t, ProbeTableEmpty(x.l))
}

// visitAll runs VisitHolders and the debug view's VisitWaits over every shard and returns the
// rows they produced.
func visitAll(tab *Table) (holders, waits int) {
	for i := range ShardCount {
		tab.VisitHolders(i, func(Snapshot, int) { holders++ })
		tab.VisitWaits(i, func(QueuedRequest) { waits++ }, func(Snapshot, int) { holders++ })
	}
	return holders, waits
}

// Locks() and Waits() (VisitHolders, VisitWaits) cost O(s + q) for s sharers of one range and of
// a key inside it, with q range requests queued over both: the requests queued over the span
// and over the key are counted once for all their holders, not walked once per holder.
func TestLocksCostsLinearInRangeSharersAndQueued(t *testing.T) {
	cost := map[int]uint64{}
	for _, n := range []int{100, 200} {
		x := newRangeSharersAndQueued(t, n, n)
		tab := x.l.tab
		for i := range ShardCount {
			tab.VisitHolders(i, func(_ Snapshot, waiters int) {
				assert.Equal(t, n, waiters, "every holder is waited for by the %d exclusive ranges", n)
			})
		}
		before := tab.Visited()
		holders, waits := visitAll(tab)
		cost[n] = tab.Visited() - before
		// VisitHolders lists both kinds of holder; VisitWaits the range locks (it lists the holders
		// of the keys with a request of their own queued).
		assert.Equal(t, 3*n, holders)
		assert.Equal(t, n, waits)
		x.release(t, n)
	}
	t.Logf("holders and requests read by the views, s = q = n: %v", cost)
	ratio := float64(cost[200]) / float64(cost[100])
	assert.Less(t, ratio, 2.5, "doubling s and q must about double the cost, not quadruple it")
}

// The same with the s range locks over s different spans, [a0000, z), [a0001, z), and so on, all
// of which the q requests queued over [a, z) meet: each holder's count is read from an index of
// the queued requests made once per view, O((s + q) log q) in all, where a walk of the requests
// that meet each span cost O(s·q).
func TestLocksCostsLinearInRangeSharersOfDifferentSpans(t *testing.T) {
	cost := map[int]uint64{}
	for _, n := range []int{100, 200} {
		x := newRangeSharersOfSpansAndQueued(t, n, n, func(i int) string { return fmt.Sprintf("a%04d", i) })
		tab := x.l.tab
		before := tab.Visited()
		holders := 0
		for i := range ShardCount {
			tab.VisitHolders(i, func(_ Snapshot, waiters int) {
				holders++
				assert.Equal(t, n, waiters, "every holder is waited for by the %d exclusive ranges", n)
			})
		}
		cost[n] = tab.Visited() - before
		assert.Equal(t, 2*n, holders)
		x.release(t, n)
	}
	t.Logf("holders and requests read, and searches' probes, by VisitHolders, s = q = n: %v", cost)
	ratio := float64(cost[200]) / float64(cost[100])
	assert.Less(t, ratio, 2.5, "doubling s and q must about double the cost, not quadruple it")
}

// BenchmarkLocksWithRangeSharersAndQueued times one VisitHolders and one VisitWaits of every
// shard, with n sharers of a range and of a key inside it and n range requests queued over both.
func BenchmarkLocksWithRangeSharersAndQueued(b *testing.B) {
	for _, n := range []int{100, 300, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			x := newRangeSharersAndQueued(b, n, n)
			for b.Loop() {
				visitAll(x.l.tab)
			}
			b.StopTimer()
			x.release(b, n)
		})
	}
}

// BenchmarkLocksWithRangeSharersOfDifferentSpans is BenchmarkLocksWithRangeSharersAndQueued with
// the n range locks over n different spans, all of which the n queued requests meet.
func BenchmarkLocksWithRangeSharersOfDifferentSpans(b *testing.B) {
	for _, n := range []int{100, 300, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			x := newRangeSharersOfSpansAndQueued(b, n, n, func(i int) string { return fmt.Sprintf("a%04d", i) })
			for b.Loop() {
				visitAll(x.l.tab)
			}
			b.StopTimer()
			x.release(b, n)
		})
	}
}
