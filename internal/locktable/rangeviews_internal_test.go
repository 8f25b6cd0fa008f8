package locktable

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rangeSharersAndQueued is a table in which s shared range locks [start(i), z) and s shared
// locks of key m inside them are held, with q exclusive range requests queued over [a, z), each
// of which gives its range back as soon as it gets it; release lets them through.
type rangeSharersAndQueued struct {
	l       *testLocker
	held    []*Claim
	results chan error
}

// sharedSpans are the layouts of the range locks the views' cost is measured over: one span, or
// a span of each lock's own, all of which the queued requests meet.
var sharedSpans = []struct {
	name  string
	start func(i int) string
}{
	{"spans=1", func(int) string { return "a" }},
	{"spans=s", func(i int) string { return fmt.Sprintf("a%04d", i) }},
}

func newRangeSharersAndQueued(t testing.TB, s, q int, start func(i int) string) *rangeSharersAndQueued {
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
		require.NoError(t, testutil.Await(t, x.results, "a queued range request"))
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

// BenchmarkLocksWithRangeSharersAndQueued times one VisitHolders and one VisitWaits of every
// shard, with n sharers of ranges (of one span, or of n) and of a key inside them and n range
// requests queued over both.
func BenchmarkLocksWithRangeSharersAndQueued(b *testing.B) {
	for _, spans := range sharedSpans {
		for _, n := range []int{100, 300, 1000} {
			b.Run(fmt.Sprintf("%s/%d", spans.name, n), func(b *testing.B) {
				x := newRangeSharersAndQueued(b, n, n, spans.start)
				for b.Loop() {
					visitAll(x.l.tab)
				}
				b.StopTimer()
				x.release(b, n)
			})
		}
	}
}
