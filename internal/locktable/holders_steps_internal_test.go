//go:build invariants

package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of cost bounds, counted in steps that the table counts only in a build with the tag
// invariants (internal/invariants): they are built with it alone.

// joinShared starts txn's shared Lock of key, which must wait, in a goroutine of the convoy that
// rolls txn back once it returns, and returns once txn is in the wait-for graph, which then holds
// inGraph Txns.
func (c *convoy) joinShared(t testing.TB, l *testLocker, txn *testTxn, key []byte, inGraph int) {
	t.Helper()
	c.n++
	go func() {
		_, err := txn.Lock(context.Background(), key, testOptions{Shared: true})
		txn.Rollback()
		c.errs <- err
	}()
	require.Eventually(t, func() bool { return graphWaiting(l) == inGraph },
		10*time.Second, 100*time.Microsecond, "waiting for %d Txns in the graph", inGraph)
}

// The check of a shared request's wait reads a constant number of edges however many readers are
// queued: each reader behind a writer reads its edge to that writer (and to an exclusive holder),
// and the writer's edges to the holders. Writers that gave up between the readers are skipped
// without the cost growing either; the reader whose edge a quitter's departure moved checks again,
// at the same cost.
func TestSharedWaitCheckCostDoesNotGrowWithQueue(t *testing.T) {
	const queued = 256
	for _, tc := range []struct {
		name   string
		shared bool   // the hot key is held shared
		edges  uint64 // read by each reader's check
	}{
		{name: "held exclusively", edges: 3}, // reader→holder, reader→writer, writer→holder
		{name: "held shared", shared: true, edges: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := newTestTable(t)
			clk := NewManualClock(time.Unix(1, 0))
			l := newTestLocker(t, tab, clk)
			ctx := context.Background()
			hot := []byte("hot")
			holder := l.Begin()
			_, err := holder.Lock(ctx, hot, testOptions{Shared: tc.shared})
			require.NoError(t, err)
			writers := newConvoy(1)
			writers.join(t, l, l.Begin(), hot, 1)

			readers := newConvoy(queued)
			perCheck := make([]uint64, 0, queued)
			for i := range queued {
				if i%16 == 8 {
					// A writer that gives up leaves the readers behind it pointing past it.
					quitter := l.Begin()
					res := make(chan error, 1)
					go func() {
						_, err := quitter.Lock(ctx, hot, testOptions{Timeout: time.Second})
						quitter.Rollback()
						res <- err
					}()
					require.Eventually(t, func() bool { return graphWaiting(l) == 2+i },
						10*time.Second, 100*time.Microsecond)
					before := edgesRead(l)
					readers.joinShared(t, l, l.Begin(), hot, 3+i) // its nearest writer is the quitter
					perCheck = append(perCheck, edgesRead(l)-before)
					beforeQuit := edgesRead(l)
					clk.Advance(time.Second)
					require.ErrorIs(t, <-res, ErrTimeout)
					require.Eventually(t, func() bool { return graphWaiting(l) == 2+i },
						10*time.Second, 100*time.Microsecond)
					// The reader's edge moved past the quitter to the first writer, a waiting Txn:
					// it checks again, at the cost of a check.
					require.Eventually(t, func() bool { return edgesRead(l)-beforeQuit == tc.edges },
						10*time.Second, 100*time.Microsecond, "the reader behind the quitter checks again")
					continue
				}
				before := edgesRead(l)
				readers.joinShared(t, l, l.Begin(), hot, 2+i)
				perCheck = append(perCheck, edgesRead(l)-before)
			}
			for i, n := range perCheck {
				require.Equal(t, tc.edges, n, "the check of reader %d", i+1)
			}
			g := &l.tab.graph
			g.mu.Lock()
			skipped := g.skipped.Load()
			g.mu.Unlock()
			assert.LessOrEqual(t, skipped, uint64(queued/16), "each writer that gave up is stepped over at most once")
			holder.Rollback()
			writers.finish(t)
			readers.finish(t)
			assert.True(t, l.tab.Empty())
		})
	}
}

// An exclusive request reads a shared key's sharers one by one only when it queues while some of
// them have no timer, and it then arms one for each (watchHolders): a TryLock reads none past the
// last sharer, and a request that queues once they are watched reads none either. So the sharers
// are read once per batch of shares granted with nobody waiting, not once per request.
func TestExclusiveRequestReadsTheSharersOncePerBatch(t *testing.T) {
	const sharers = 100
	tab := newTestTable(t)
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, tab, clk)
	key := []byte("shared")
	for range sharers {
		_, err := l.Lock(context.Background(), key, testOptions{Shared: true})
		require.NoError(t, err)
	}
	for range 10 {
		_, err := l.TryLock(key, testOptions{})
		require.ErrorIs(t, err, ErrLocked)
	}
	assert.Zero(t, tab.SharersRead(), "exclusive TryLocks of a key held shared")

	ctx, cancel := context.WithCancel(context.Background())
	first := lockAsync(ctx, l, key, testOptions{})
	WaitQueued(t, l, key, 1)
	assert.Equal(t, uint64(sharers), tab.SharersRead(), "the first exclusive request that queues reads each sharer")
	second := lockAsync(ctx, l, key, testOptions{})
	WaitQueued(t, l, key, 2)
	assert.Equal(t, uint64(sharers), tab.SharersRead(), "the next one finds them watched")
	cancel()
	for _, c := range []<-chan lockResult{first, second} {
		require.ErrorIs(t, (<-c).err, context.Canceled)
	}
}
