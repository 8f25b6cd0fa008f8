package locktable

import (
	"context"
	"testing"
	"time"

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
	require.ErrorIs(t, Await(t, timedOut, "the timeout").err, ErrTimeout)
	cancel()
	require.ErrorIs(t, Await(t, cancelled, "the cancellation").err, context.Canceled)

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
		r := Await(t, got, "the waiter's grant")
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
		r := Await(t, got, "the waiter's grant")
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
		require.ErrorIs(t, Await(t, c, "the closed Locker's waiter's return").err, ErrClosed)
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
		r := Await(t, c, "the waiter's grant")
		require.NoError(t, r.err)
		require.True(t, r.h.Release())
	}

	t.Run("a woken waiter is not passed", func(t *testing.T) {
		holder, err := l.TryLock(key, testOptions{})
		require.NoError(t, err)
		got := queue(testOptions{OwnerHolds: true}, 1)
		w := releaseWokenNotRun(t, holder) // within the window, a newcomer could pass it
		_, err = l.TryLock(key, testOptions{})
		require.ErrorIs(t, err, ErrLocked, "no barging past a request whose owner holds other keys")
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
