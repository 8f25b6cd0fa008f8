package locktable

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// graphWaiting is the number of Txns in l's wait-for graph.
func graphWaiting(l *testLocker) int {
	g := &l.tab.graph
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting)
}

// edgesRead is the number of edges every search of l's wait-for graph has read so far.
func edgesRead(l *testLocker) uint64 {
	g := &l.tab.graph
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.edgesRead
}

// convoy is Txns queued one by one for a key, each Lock in a goroutine of its own that rolls its
// Txn back as soon as the Lock returns, which lets the next one through.
type convoy struct {
	n    int
	errs chan error
}

func newConvoy(capacity int) *convoy { return &convoy{errs: make(chan error, capacity)} }

// join starts txn's Lock of key, which must wait, and returns once txn is in the wait-for graph,
// which then holds inGraph Txns.
func (c *convoy) join(t testing.TB, l *testLocker, txn *Txn, key []byte, inGraph int) {
	t.Helper()
	c.n++
	go func() {
		_, err := txn.Lock(context.Background(), key, Options{})
		txn.Rollback()
		c.errs <- err
	}()
	require.Eventually(t, func() bool { return graphWaiting(l) == inGraph },
		10*time.Second, 100*time.Microsecond, "waiting for %d Txns in the graph", inGraph)
}

// finish waits for every Lock of the convoy to return and requires that each got its key.
func (c *convoy) finish(t testing.TB) {
	t.Helper()
	for range c.n {
		require.NoError(t, <-c.errs)
	}
}

// The check of a wait reads one edge per Txn on the path it follows, however many requests are
// queued: with 512 Txns queued for a hot key, the 513th reads as many edges as the first. When
// the holder itself waits behind a queue of its own, the path is one Txn longer and the check
// reads one edge more, again whatever the queues' lengths.
func TestWaitCheckCostDoesNotGrowWithQueue(t *testing.T) {
	const queued = 512
	for _, tc := range []struct {
		name        string
		holderWaits bool
		edges       uint64 // read by each check: one per Txn on the path
	}{
		{name: "holder runs", edges: 1},
		{name: "holder waits behind a queue", holderWaits: true, edges: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := newTestTable(t)
			l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
			ctx := context.Background()
			hot, other := []byte("hot"), []byte("other")
			holder := l.Begin()
			_, err := holder.Lock(ctx, hot, Options{})
			require.NoError(t, err)

			inGraph := 0
			var otherQueue *convoy
			var otherHolder *Txn
			if tc.holderWaits {
				otherHolder = l.Begin()
				_, err := otherHolder.Lock(ctx, other, Options{})
				require.NoError(t, err)
				otherQueue = newConvoy(queued + 1)
				for range queued {
					inGraph++
					otherQueue.join(t, l, l.Begin(), other, inGraph)
				}
				inGraph++
				otherQueue.join(t, l, holder, other, inGraph) // the holder of hot waits last for other
			}

			hotQueue := newConvoy(queued + 1)
			perCheck := make([]uint64, 0, queued+1)
			for range queued + 1 {
				before := edgesRead(l)
				inGraph++
				hotQueue.join(t, l, l.Begin(), hot, inGraph)
				perCheck = append(perCheck, edgesRead(l)-before)
			}
			for i, n := range perCheck {
				require.Equal(t, tc.edges, n, "the check of waiter %d of %s", i+1, hot)
			}

			// Unwind: each Txn that gets its key rolls back, and the holder of hot rolls back
			// once it gets other.
			if tc.holderWaits {
				otherHolder.Rollback()
				otherQueue.finish(t)
			} else {
				holder.Rollback()
			}
			hotQueue.finish(t)
			assert.True(t, l.tab.Empty())
		})
	}
}

// BenchmarkWaitGraphSearch is the search for a cycle through the last of n Txns queued for a key
// held by a Txn that runs: its cost does not grow with n.
func BenchmarkWaitGraphSearch(b *testing.B) {
	for _, n := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("queued=%d", n), func(b *testing.B) {
			tab := newTestTable(b)
			l := newTestLocker(b, tab, NewManualClock(time.Unix(1, 0)))
			hot := []byte("hot")
			holder := l.Begin()
			_, err := holder.Lock(context.Background(), hot, Options{})
			require.NoError(b, err)
			q := newConvoy(n)
			var last *Txn
			for i := range n {
				last = l.Begin()
				q.join(b, l, last, hot, i+1)
			}
			g := &l.tab.graph
			b.ReportAllocs()
			b.ResetTimer()
			cycles := 0
			g.mu.Lock()
			for range b.N {
				if g.cycleThrough(last) != nil {
					cycles++
				}
			}
			g.mu.Unlock()
			b.StopTimer()
			require.Zero(b, cycles, "no cycle runs through a convoy")
			holder.Rollback()
			q.finish(b)
		})
	}
}
