package locktable

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/require"
)

// graphWaiting is the number of Txns in l's wait-for graph.
func graphWaiting(l *testLocker) int {
	g := &l.tab.graph
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting)
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
func (c *convoy) join(t testing.TB, l *testLocker, txn *testTxn, key []byte, inGraph int) {
	t.Helper()
	c.n++
	go func() {
		_, err := txn.Lock(context.Background(), key, testOptions{})
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

// BenchmarkWaitGraphSearch is the search for a cycle through the last of n Txns queued for a key
// held by a Txn that runs: its cost does not grow with n.
func BenchmarkWaitGraphSearch(b *testing.B) {
	for _, n := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("queued=%d", n), func(b *testing.B) {
			tab := newTestTable(b)
			l := newTestLocker(b, tab, NewManualClock(time.Unix(1, 0)))
			hot := []byte("hot")
			holder := l.Begin()
			_, err := holder.Lock(context.Background(), hot, testOptions{})
			require.NoError(b, err)
			q := newConvoy(n)
			var last *testTxn
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

// A holder whose lease has passed is no edge of the wait-for graph, though nobody has settled it
// yet: its key passes on at its deadline. Here o3's share of k1 lapsed unwatched while o3 waits
// to upgrade k0, which o1 shares. o1's exclusive request for k1 must wait for o2, the live sharer,
// and not fail with a deadlock through o3's lapsed share.
func TestLapsedHolderIsNoWaitForEdge(t *testing.T) {
	tab := newTestTable(t)
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, tab, clk)
	ctx := context.Background()
	k0, k1 := []byte("k0"), []byte("k1")
	o1, o2, o3 := l.Begin(), l.Begin(), l.Begin()
	o1.name, o2.name, o3.name = "o1", "o2", "o3"
	_, err := o3.Lock(ctx, k1, testOptions{Shared: true, Lease: 10 * time.Millisecond})
	require.NoError(t, err)
	_, err = o2.Lock(ctx, k1, testOptions{Shared: true}) // the last sharer: a request settles back to it
	require.NoError(t, err)
	_, err = o1.Lock(ctx, k0, testOptions{Shared: true})
	require.NoError(t, err)
	_, err = o3.Lock(ctx, k0, testOptions{Shared: true})
	require.NoError(t, err)
	upgrade := make(chan error, 1)
	go func() {
		_, err := o3.Lock(ctx, k0, testOptions{Timeout: time.Hour}) // waits for o1's share
		upgrade <- err
	}()
	require.Eventually(t, func() bool { return graphWaiting(l) == 1 }, 10*time.Second, 100*time.Microsecond)
	clk.Advance(10 * time.Millisecond) // o3's share of k1 lapses; nothing watches it

	got := make(chan error, 1)
	go func() {
		_, err := o1.Lock(ctx, k1, testOptions{Timeout: time.Hour})
		got <- err
	}()
	WaitQueued(t, l, k1, 1)
	select {
	case err := <-got:
		t.Fatalf("o1's request returned %v: only o2, which does not wait, holds k1", err)
	default:
	}
	o2.Rollback()
	clk.Advance(0) // o3's lapsed share, watched since o1 queued, falls due: o1 gets k1
	require.NoError(t, testutil.Await(t, got, "o1's grant"))
	o1.Rollback() // o3's upgrade goes through
	require.NoError(t, testutil.Await(t, upgrade, "o3's upgrade"))
	o3.Rollback()
}
