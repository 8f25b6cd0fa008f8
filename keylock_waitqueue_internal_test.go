package recordlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/tempdb"
)

func TestTableEmptyAfterWaitersGiveUp(t *testing.T) {
	db := tempdb.New(t)
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, db, clk)
	key := []byte("k")
	h, err := l.TryLock(key, Options{})
	require.NoError(t, err)
	require.Equal(t, 0, heapLen(l, key), "nobody watches the holder's lease yet")

	// One waiter times out, one is cancelled.
	timedOut := make(chan error, 1)
	go func() {
		_, err := l.Lock(context.Background(), key, Options{Timeout: time.Second})
		timedOut <- err
	}()
	WaitQueued(t, l, key, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error, 1)
	go func() {
		_, err := l.Lock(ctx, key, Options{Timeout: time.Minute})
		cancelled <- err
	}()
	WaitQueued(t, l, key, 2)
	require.Equal(t, 3, heapLen(l, key), "each waiter's timeout, and the holder's lease it watches")

	clk.Advance(time.Second)
	require.ErrorIs(t, <-timedOut, ErrTimeout)
	cancel()
	require.ErrorIs(t, <-cancelled, context.Canceled)

	assert.Equal(t, 0, ProbeQueuedWaiters(l, key))
	assert.Equal(t, 1, heapLen(l, key), "only the holder's lease is left")
	assert.False(t, l.tab.empty())
	require.True(t, h.Release())
	assert.True(t, l.tab.empty())
	assert.True(t, ProbeTableEmpty(l))
}

// A newcomer may take a released key ahead of the woken oldest waiter only while that waiter has
// waited less than bargeWindow; past it, the waiter is handed the key directly.
func TestBargingWindow(t *testing.T) {
	db := tempdb.New(t)
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, db, clk)
	key := []byte("k")
	lockAsync := func() <-chan *Handle {
		c := make(chan *Handle, 1)
		go func() {
			h, err := l.Lock(context.Background(), key, Options{Timeout: time.Minute})
			assert.NoError(t, err)
			c <- h
		}()
		WaitQueued(t, l, key, 1)
		return c
	}

	t.Run("within the window", func(t *testing.T) {
		holder, err := l.TryLock(key, Options{})
		require.NoError(t, err)
		got := lockAsync()
		w := releaseWokenNotRun(t, holder)
		clk.Advance(bargeWindow - time.Nanosecond)
		barger, err := l.TryLock(key, Options{})
		require.NoError(t, err, "a newcomer may barge within the window")

		w.signal() // the woken waiter finds the key taken and stays at the head of the queue
		require.Eventually(t, func() bool { return ProbeWokenWaiters(l, key) == 0 }, 10*time.Second, 100*time.Microsecond)
		assert.Equal(t, 1, ProbeQueuedWaiters(l, key))

		clk.Advance(time.Nanosecond)
		require.True(t, barger.Release())
		assert.Equal(t, 0, ProbeQueuedWaiters(l, key), "the barger's release handed the key to the waiter")
		_, err = l.TryLock(key, Options{})
		require.ErrorIs(t, err, ErrLocked)
		h := <-got
		require.NotNil(t, h)
		require.True(t, h.Release())
	})

	t.Run("past the window", func(t *testing.T) {
		holder, err := l.TryLock(key, Options{})
		require.NoError(t, err)
		got := lockAsync()
		w := releaseWokenNotRun(t, holder)
		clk.Advance(bargeWindow)
		_, err = l.TryLock(key, Options{})
		require.ErrorIs(t, err, ErrLocked, "the woken waiter has waited bargeWindow: no barging")
		w.signal()
		h := <-got
		require.NotNil(t, h)
		require.True(t, h.Release())
	})
	assert.True(t, ProbeTableEmpty(l))
}

func TestCloseAbandonsEveryWaiterWhenOneIsHandedTheKey(t *testing.T) {
	db := tempdb.New(t)
	clk := NewManualClock(time.Unix(1, 0))
	a := newTestLocker(t, db, clk)
	b := newTestLocker(t, db, clk)
	key := []byte("k")
	hb, err := b.TryLock(key, Options{})
	require.NoError(t, err)

	const n = 3
	res := make(chan error, n)
	for i := range n {
		go func() {
			_, err := a.Lock(context.Background(), key, Options{Timeout: time.Minute})
			res <- err
		}()
		WaitQueued(t, a, key, i+1)
	}

	// Release hb as Release does, with the oldest waiter woken but not yet scheduled to run.
	sh := b.tab.shard(hb.hash)
	sh.mu.Lock()
	e := hb.e
	hb.setFlags(flagReleased)
	hb.clearFlags(flagHeld)
	sh.unschedule(hb)
	e.holder = nil
	e.wakePending = true
	e.head.state = waitWoken
	sh.mu.Unlock()
	// The second waiter has now waited bargeWindow: abandoning the first hands it the key.
	clk.Advance(bargeWindow)

	require.NoError(t, a.Close())
	for range n {
		select {
		case err := <-res:
			require.ErrorIs(t, err, ErrClosed)
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter of the closed Locker is still queued")
		}
	}
	assert.True(t, b.tab.empty())
	h, err := b.TryLock(key, Options{})
	require.NoError(t, err)
	require.True(t, h.Release())
}
