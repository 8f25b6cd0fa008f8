package locktable

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTableEmptyAfterWaitersGiveUp(t *testing.T) {
	tab := newTestTable(t)
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, tab, clk)
	key := []byte("k")
	h, err := l.TryLock(key, testOptions{})
	require.NoError(t, err)
	require.Equal(t, 0, heapLen(l, key), "nobody watches the holder's lease yet")

	// One waiter times out, one is cancelled.
	timedOut := lockAsync(context.Background(), l, key, testOptions{Timeout: time.Second})
	WaitQueued(t, l, key, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := lockAsync(ctx, l, key, testOptions{Timeout: time.Minute})
	WaitQueued(t, l, key, 2)
	require.Equal(t, 3, heapLen(l, key), "each waiter's timeout, and the holder's lease it watches")

	clk.Advance(time.Second)
	require.ErrorIs(t, testutil.Await(t, timedOut, "the timeout").err, ErrTimeout)
	cancel()
	require.ErrorIs(t, testutil.Await(t, cancelled, "the cancellation").err, context.Canceled)

	assert.Equal(t, 0, ProbeQueuedWaiters(l, key))
	assert.Equal(t, 1, heapLen(l, key), "only the holder's lease is left")
	assert.False(t, l.tab.Empty())
	require.True(t, h.Release())
	assert.True(t, l.tab.Empty())
	assert.True(t, ProbeTableEmpty(l))
}

// A newcomer may take a released key ahead of the woken oldest waiter only while that waiter has
// waited less than bargeWindow; past it, the waiter is handed the key directly.
func TestBargingWindow(t *testing.T) {
	tab := newTestTable(t)
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, tab, clk)
	key := []byte("k")
	queue := func() <-chan lockResult {
		c := lockAsync(context.Background(), l, key, testOptions{Timeout: time.Minute})
		WaitQueued(t, l, key, 1)
		return c
	}

	t.Run("within the window", func(t *testing.T) {
		holder, err := l.TryLock(key, testOptions{})
		require.NoError(t, err)
		got := queue()
		w := releaseWokenNotRun(t, holder)
		clk.Advance(bargeWindow - time.Nanosecond)
		barger, err := l.TryLock(key, testOptions{})
		require.NoError(t, err, "a newcomer may barge within the window")

		w.signal() // the woken waiter finds the key taken and stays at the head of the queue
		require.Eventually(t, func() bool { return ProbeWokenWaiters(l, key) == 0 }, 10*time.Second, 100*time.Microsecond)
		assert.Equal(t, 1, ProbeQueuedWaiters(l, key))

		clk.Advance(time.Nanosecond)
		require.True(t, barger.Release())
		assert.Equal(t, 0, ProbeQueuedWaiters(l, key), "the barger's release handed the key to the waiter")
		_, err = l.TryLock(key, testOptions{})
		require.ErrorIs(t, err, ErrLocked)
		r := testutil.Await(t, got, "the waiter's grant")
		require.NoError(t, r.err)
		require.NotNil(t, r.h)
		require.True(t, r.h.Release())
	})

	t.Run("past the window", func(t *testing.T) {
		holder, err := l.TryLock(key, testOptions{})
		require.NoError(t, err)
		got := queue()
		w := releaseWokenNotRun(t, holder)
		clk.Advance(bargeWindow)
		_, err = l.TryLock(key, testOptions{})
		require.ErrorIs(t, err, ErrLocked, "the woken waiter has waited bargeWindow: no barging")
		w.signal()
		r := testutil.Await(t, got, "the waiter's grant")
		require.NoError(t, r.err)
		require.NotNil(t, r.h)
		require.True(t, r.h.Release())
	})
	assert.True(t, ProbeTableEmpty(l))
}

func TestCloseAbandonsEveryWaiterWhenOneIsHandedTheKey(t *testing.T) {
	tab := newTestTable(t)
	clk := NewManualClock(time.Unix(1, 0))
	a := newTestLocker(t, tab, clk)
	b := newTestLocker(t, tab, clk)
	key := []byte("k")
	hb, err := b.TryLock(key, testOptions{})
	require.NoError(t, err)

	var res []<-chan lockResult
	for i := range 3 {
		res = append(res, lockAsync(context.Background(), a, key, testOptions{Timeout: time.Minute}))
		WaitQueued(t, a, key, i+1)
	}

	releaseWokenNotRun(t, hb) // the oldest waiter is woken but not yet scheduled to run
	// The second waiter has now waited bargeWindow: abandoning the first hands it the key.
	clk.Advance(bargeWindow)

	require.NoError(t, a.Close())
	for _, c := range res {
		require.ErrorIs(t, testutil.Await(t, c, "the closed Locker's waiter's return").err, ErrClosed)
	}
	assert.True(t, b.tab.Empty())
	h, err := b.TryLock(key, testOptions{})
	require.NoError(t, err)
	require.True(t, h.Release())
}

// No newcomer takes a freed key ahead of its queue while a request queued for it is of an owner
// that holds other keys (flagOwnerHolds), even within bargeWindow: every wait for that owner's
// keys waits for its request too. The key is handed to the oldest waiter at the release, and a
// woken oldest waiter keeps it from newcomers.
func TestNoBargingWhileAnOwnerThatHoldsWaits(t *testing.T) {
	tab := newTestTable(t)
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, tab, clk)
	key := []byte("k")
	queue := func(o testOptions, n int) <-chan lockResult {
		o.Timeout = time.Minute
		c := lockAsync(context.Background(), l, key, o)
		WaitQueued(t, l, key, n)
		return c
	}
	grantedTo := func(c <-chan lockResult) {
		t.Helper()
		r := testutil.Await(t, c, "the waiter's grant")
		require.NoError(t, r.err)
		require.True(t, r.h.Release())
	}

	t.Run("a woken waiter is not passed", func(t *testing.T) {
		holder, err := l.TryLock(key, testOptions{})
		require.NoError(t, err)
		got := queue(testOptions{OwnerHolds: true}, 1)
		w := releaseWokenNotRun(t, holder) // within the window, a newcomer could pass it
		_, err = l.TryLock(key, testOptions{})
		require.ErrorIs(t, err, ErrLocked, "DESIGN §6 (bargeable): no barging past a request whose owner holds other keys")
		w.signal()
		grantedTo(got)
	})

	t.Run("the oldest waiter is handed the key at the release", func(t *testing.T) {
		holder, err := l.TryLock(key, testOptions{})
		require.NoError(t, err)
		first := queue(testOptions{}, 1) // holds nothing, but one behind it does
		second := queue(testOptions{OwnerHolds: true}, 2)
		sh := holder.shard()
		sh.mu.Lock()
		head := holder.e.head
		sh.mu.Unlock()
		require.True(t, holder.Release())
		sh.mu.Lock()
		state := head.state
		sh.mu.Unlock()
		assert.Equal(t, waitGranted, state, "handed over at the release, not woken to compete")
		_, err = l.TryLock(key, testOptions{})
		require.ErrorIs(t, err, ErrLocked)
		grantedTo(first)
		grantedTo(second)
	})

	t.Run("without such a request, barging as before", func(t *testing.T) {
		holder, err := l.TryLock(key, testOptions{})
		require.NoError(t, err)
		got := queue(testOptions{}, 1)
		w := releaseWokenNotRun(t, holder)
		barger, err := l.TryLock(key, testOptions{})
		require.NoError(t, err, "a newcomer may pass a waiter of no other key within the window")
		w.signal()
		require.True(t, barger.Release())
		grantedTo(got)
	})
	assert.True(t, ProbeTableEmpty(l))
}

// Waiters queued in a known order acquire in that order, and each release serves exactly one of
// them: the others stay queued and asleep.
func TestWaitersAcquireInArrivalOrder(t *testing.T) {
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, newTestTable(t), clk)
	key := []byte("k")
	holder, err := l.TryLock(key, testOptions{})
	require.NoError(t, err)

	const n = 6
	got := make([]<-chan lockResult, n)
	for i := range n {
		got[i] = lockAsync(context.Background(), l, key, testOptions{Timeout: time.Minute})
		WaitQueued(t, l, key, i+1)
	}
	for i := range n {
		if i == 1 {
			// The first waiter was woken to take the key; the others have now waited 1 ms and
			// are handed it directly.
			clk.Advance(time.Millisecond)
		}
		require.True(t, holder.Release())
		assert.LessOrEqual(t, ProbeWokenWaiters(l, key), 1, "a release woke more than one waiter")
		holder = granted(t, got[i], fmt.Sprintf("waiter %d", i))
		for j := i + 1; j < n; j++ {
			select {
			case <-got[j]:
				t.Fatalf("release %d also served waiter %d", i, j)
			default:
			}
		}
		assert.Equal(t, n-i-1, ProbeQueuedWaiters(l, key))
		assert.Equal(t, 0, ProbeWokenWaiters(l, key), "no waiter but the served one was woken")
	}
	require.True(t, holder.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// Once the oldest waiter has waited 1 ms, a release hands it the key directly: a newcomer
// cannot take it, not even in the instant after Release returns.
func TestOldestWaiterNotPassedOverPastOneMillisecond(t *testing.T) {
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, newTestTable(t), clk)
	key := []byte("k")
	holder, err := l.TryLock(key, testOptions{})
	require.NoError(t, err)
	got := lockAsync(context.Background(), l, key, testOptions{Timeout: time.Minute})
	WaitQueued(t, l, key, 1)

	clk.Advance(time.Millisecond)
	require.True(t, holder.Release())
	assert.Equal(t, 0, ProbeQueuedWaiters(l, key), "Release handed the key over itself")
	_, err = l.TryLock(key, testOptions{})
	require.ErrorIs(t, err, ErrLocked, "the key went to the oldest waiter")
	require.True(t, granted(t, got, "the waiter").Release())
}

// TestFIFOOrderOfTenThousandWaiters queues 10,000 lock requests on one key one at a time and
// checks they are served exactly in arrival order, both when each release hands the key straight
// to the oldest waiter (it has waited past the barging window) and when it wakes the oldest
// waiter to take it (no newcomer competes).
func TestFIFOOrderOfTenThousandWaiters(t *testing.T) {
	const waiters = 10_000
	for _, handoff := range []bool{true, false} {
		t.Run(fmt.Sprintf("handoff=%v", handoff), func(t *testing.T) {
			base := runtime.NumGoroutine()
			clk := NewManualClock(time.Unix(1, 0))
			l := newTestLocker(t, newTestTable(t), clk)
			key := []byte("queue")
			h, err := l.TryLock(key, testOptions{Lease: time.Hour})
			require.NoError(t, err)

			var mu sync.Mutex
			order := make([]int, 0, waiters)
			var wg sync.WaitGroup
			for i := range waiters {
				wg.Go(func() {
					h, err := l.Lock(context.Background(), key, testOptions{Timeout: time.Hour})
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					assert.True(t, h.Release())
				})
				testutil.WaitUntil(t, fmt.Sprintf("waiter %d queued", i), func() bool { return waitingOn(l, key) == i+1 })
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
			assert.True(t, ProbeTableEmpty(l))
			testutil.SettleGoroutines(t, base)
		})
	}
}

// TestHundredThousandCancelledWaits gives up 100,000 waits on a held key, in batches of 1,000
// concurrent waiters: 90 batches by cancelling their ctx, 10 by letting their timeout pass. Each
// returns its ctx error or ErrTimeout, and afterwards nothing is left: the goroutine count is at
// its baseline, the table is empty, no deadline is scheduled and no timer is armed.
func TestHundredThousandCancelledWaits(t *testing.T) {
	const batches, batch = 100, 1000
	base := runtime.NumGoroutine()
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, newTestTable(t), clk)
	key := []byte("contended")
	h, err := l.TryLock(key, testOptions{Lease: time.Hour})
	require.NoError(t, err)
	// Waits shorter than the lease, so each batch's first waiter re-arms the shard's timer.
	wait := testOptions{Timeout: time.Second}

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
		testutil.WaitUntil(t, "the batch queued", func() bool { return waitingOn(l, key) == batch })
		byTimeout := b%10 == 9
		if byTimeout {
			clk.Advance(wait.Timeout)
		} else {
			cancel()
		}
		for range batch {
			err := <-errs
			if byTimeout {
				require.ErrorIs(t, err, ErrTimeout)
				timedOut++
			} else {
				require.ErrorIs(t, err, context.Canceled)
				cancelled++
			}
		}
		cancel()
	}
	require.Equal(t, batches*batch, cancelled+timedOut)
	assert.Zero(t, ProbeQueuedWaiters(l, key))
	assert.Equal(t, 1, l.tab.Deadlines(), "only the holder's lease is scheduled")
	require.True(t, h.Release())
	assert.True(t, ProbeTableEmpty(l), "the table is empty")
	// A shard keeps its one timer armed after its keys go idle (that spares every uncontended lock
	// a timer of its own); it fires once, finds nothing due and is not re-armed.
	assert.LessOrEqual(t, PendingTimers(clk), 1, "no timer per waiter")
	clk.Advance(time.Hour)
	assert.Zero(t, PendingTimers(clk), "a timer was re-armed on an idle table")
	testutil.SettleGoroutines(t, base)
	t.Logf("%d waits cancelled, %d timed out", cancelled, timedOut)
}

// A shared request that arrives while the key is held shared and a request is queued queues
// behind it (the rule, fairness): a stream of readers never starves the writer queued.
func TestSharedNewcomerQueuesBehindAQueuedWriter(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	key := []byte("k")
	reader, err := l.TryLock(key, testOptions{Shared: true})
	require.NoError(t, err)
	writer := lockAsync(context.Background(), l, key, testOptions{})
	WaitQueued(t, l, key, 1)
	_, err = l.TryLock(key, testOptions{Shared: true})
	require.ErrorIs(t, err, ErrLocked, "a shared request that arrives while a writer is queued "+
		"queues behind it, though the key is held shared")
	require.True(t, reader.Release())
	require.True(t, granted(t, writer, "the writer").Release())
	assert.True(t, ProbeTableEmpty(l))
}
