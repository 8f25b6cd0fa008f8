package recordlock_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// Waiters queued in a known order acquire in that order, and each release serves exactly one of
// them: the others stay queued and asleep.
func TestWaitersAcquireInArrivalOrder(t *testing.T) {
	clk, l := manual(t, openDB(t))
	key := []byte("k")
	holder, err := l.TryLock(key, recordlock.Options{})
	require.NoError(t, err)

	const n = 6
	got := make([]<-chan lockResult, n)
	for i := range n {
		got[i] = lockAsync(context.Background(), l, key, wait)
		waitQueued(t, l, key, i+1)
	}
	for i := range n {
		if i == 1 {
			// The first waiter was woken to take the key; the others have now waited 1 ms and
			// are handed it directly.
			clk.Advance(time.Millisecond)
		}
		require.True(t, holder.Release())
		assert.LessOrEqual(t, recordlock.ProbeWokenWaiters(l, key), 1, "a release woke more than one waiter")
		r := await(t, got[i], "Lock")
		require.NoError(t, r.err, "waiter %d", i)
		holder = r.h
		for j := i + 1; j < n; j++ {
			select {
			case <-got[j]:
				t.Fatalf("release %d also served waiter %d", i, j)
			default:
			}
		}
		assert.Equal(t, n-i-1, recordlock.ProbeQueuedWaiters(l, key))
		assert.Equal(t, 0, recordlock.ProbeWokenWaiters(l, key), "no waiter but the served one was woken")
	}
	require.True(t, holder.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Once the oldest waiter has waited 1 ms, a release hands it the key directly: a newcomer
// cannot take it, not even in the instant after Release returns.
func TestOldestWaiterNotPassedOverPastOneMillisecond(t *testing.T) {
	clk, l := manual(t, openDB(t))
	key := []byte("k")
	holder, err := l.TryLock(key, recordlock.Options{})
	require.NoError(t, err)
	got := lockAsync(context.Background(), l, key, wait)
	waitQueued(t, l, key, 1)

	clk.Advance(time.Millisecond)
	require.True(t, holder.Release())
	assert.Equal(t, 0, recordlock.ProbeQueuedWaiters(l, key), "Release handed the key over itself")
	_, err = l.TryLock(key, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked, "the key went to the oldest waiter")
	r := await(t, got, "Lock")
	require.NoError(t, r.err)
	require.True(t, r.h.Release())
}

// Within 1 ms a newcomer may barge ahead of the woken waiter; once the waiter has waited 1 ms,
// the barger's release hands it the key directly.
func TestBargerCannotKeepPassingOverWaiter(t *testing.T) {
	clk, l := manual(t, openDB(t))
	key := []byte("k")
	barged := 0
	for range 20 {
		holder, err := l.TryLock(key, recordlock.Options{})
		require.NoError(t, err)
		got := lockAsync(context.Background(), l, key, wait)
		waitQueued(t, l, key, 1)

		require.True(t, holder.Release()) // within 1 ms: the waiter is woken
		if barger, err := l.TryLock(key, recordlock.Options{}); err == nil {
			barged++
			assert.Equal(t, 1, recordlock.ProbeQueuedWaiters(l, key), "the passed-over waiter keeps its place")
			clk.Advance(time.Millisecond)
			require.True(t, barger.Release())
			_, err = l.TryLock(key, recordlock.Options{})
			require.ErrorIs(t, err, recordlock.ErrLocked, "the waiter got the key directly")
		} else {
			require.ErrorIs(t, err, recordlock.ErrLocked)
		}
		require.True(t, granted(t, got, "Lock").Release())
	}
	t.Logf("a newcomer barged ahead of a woken waiter in %d of 20 rounds", barged)
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// TestFIFOOrderOfTenThousandWaiters queues 10,000 Lock calls on one key one at a time and checks
// they are served exactly in arrival order, both when each release hands the key straight to the
// oldest waiter (it has waited past the barging window) and when it wakes the oldest waiter to
// take it (no newcomer competes).
func TestFIFOOrderOfTenThousandWaiters(t *testing.T) {
	const waiters = 10_000
	for _, handoff := range []bool{true, false} {
		t.Run(fmt.Sprintf("handoff=%v", handoff), func(t *testing.T) {
			base := runtime.NumGoroutine()
			db := openDB(t)
			clk, l := manual(t, db)
			key := []byte("queue")
			h, err := l.TryLock(key, recordlock.Options{Scope: recordlock.ScopeNode, Lease: recordlock.MaxLease})
			require.NoError(t, err)

			var mu sync.Mutex
			order := make([]int, 0, waiters)
			var wg sync.WaitGroup
			wait := recordlock.Options{Scope: recordlock.ScopeNode, Timeout: recordlock.MaxTimeout}
			for i := range waiters {
				wg.Go(func() {
					h, err := l.Lock(context.Background(), key, wait)
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					assert.True(t, h.Release())
				})
				// Stats counts the queued waiters in O(1), where walking the queue would make the test quadratic.
				waitUntil(t, fmt.Sprintf("waiter %d queued", i), func() bool { return l.Stats().Waiting == i+1 })
			}
			if handoff {
				clk.Advance(time.Millisecond) // every waiter has now waited the whole barging window
			}
			require.True(t, h.Release())
			wg.Wait()

			require.Len(t, order, waiters)
			for i, got := range order {
				if got != i {
					t.Fatalf("position %d was served to waiter %d: not FIFO", i, got)
				}
			}
			assert.True(t, recordlock.ProbeTableEmpty(l))
			assert.Zero(t, recordlock.ProbeDeadlines(l))
			settleGoroutines(t, base)
		})
	}
}

// TestHundredThousandCancelledWaits gives up 100,000 waits on a held key, in batches of 1,000
// concurrent waiters: 90 batches by cancelling their ctx, 10 by letting their Timeout pass. Each
// returns its ctx error or ErrTimeout, and afterwards nothing is left: the goroutine count is at
// its baseline, the table is empty, no deadline is scheduled and no timer is armed.
func TestHundredThousandCancelledWaits(t *testing.T) {
	const batches, batch = 100, 1000
	base := runtime.NumGoroutine()
	db := openDB(t)
	clk, l := manual(t, db)
	key := []byte("contended")
	h, err := l.TryLock(key, recordlock.Options{Scope: recordlock.ScopeNode, Lease: recordlock.MaxLease})
	require.NoError(t, err)
	// Waits shorter than the lease, so each batch's first waiter re-arms the shard's timer.
	wait := recordlock.Options{Scope: recordlock.ScopeNode, Timeout: time.Second}

	cancelled, timedOut := 0, 0
	for b := range batches {
		ctx, cancel := context.WithCancel(context.Background())
		errs := make(chan error, batch)
		for range batch {
			go func() {
				_, err := l.Lock(ctx, key, wait)
				errs <- err
			}()
		}
		waitUntil(t, "the batch queued", func() bool { return recordlock.ProbeQueuedWaiters(l, key) == batch })
		byTimeout := b%10 == 9
		if byTimeout {
			clk.Advance(wait.Timeout)
		} else {
			cancel()
		}
		for range batch {
			err := <-errs
			if byTimeout {
				require.ErrorIs(t, err, recordlock.ErrTimeout)
				timedOut++
			} else {
				require.ErrorIs(t, err, context.Canceled)
				cancelled++
			}
		}
		cancel()
	}
	require.Equal(t, batches*batch, cancelled+timedOut)
	assert.Zero(t, recordlock.ProbeQueuedWaiters(l, key))
	assert.Equal(t, 1, recordlock.ProbeDeadlines(l), "only the holder's lease is scheduled")
	require.True(t, h.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l), "the table is empty")
	assert.Zero(t, recordlock.ProbeDeadlines(l), "no deadline is scheduled")
	// A shard keeps its one timer armed after its keys go idle (that spares every uncontended Lock
	// a timer of its own); it fires once, finds nothing due and is not re-armed.
	assert.LessOrEqual(t, recordlock.ProbeTimers(clk), 1, "no timer per waiter")
	clk.Advance(recordlock.MaxLease)
	assert.Zero(t, recordlock.ProbeTimers(clk), "a timer was re-armed on an idle table")
	settleGoroutines(t, base)
	t.Logf("%d waits cancelled, %d timed out", cancelled, timedOut)
}
