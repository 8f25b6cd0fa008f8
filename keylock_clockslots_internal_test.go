package recordlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/tempdb"
)

// Close fails a woken waiter of its Locker, and the key then passes over the Locker's other
// waiters too: the table never grants a key to a closed Locker, so no handle of it is scheduled
// after Close and its clock's schedulers, once dropped, stay dropped. A Locker that takes over the
// clock slot runs its timers on its own clock.
func TestClosedLockersClockStaysDropped(t *testing.T) {
	db := tempdb.New(t)
	start := time.Unix(1, 0)
	keep := newTestLocker(t, db, NewManualClock(start)) // slot 0 for the whole test
	tab := keep.tab
	key := []byte("k")
	held, err := keep.TryLock(key, Options{})
	require.NoError(t, err)

	deadClock := NewManualClock(start)
	l, err := New(db, WithClock(deadClock))
	require.NoError(t, err)
	require.Equal(t, 1, l.clockID)
	const n = 3
	res := make(chan error, n)
	for i := range n {
		go func() {
			_, err := l.Lock(context.Background(), key, Options{Timeout: time.Minute})
			res <- err
		}()
		WaitQueued(t, keep, key, i+1)
	}
	releaseWokenNotRun(t, held)
	deadClock.Advance(bargeWindow) // the waiters behind the woken one are past the window
	require.NoError(t, l.Close())
	for range n {
		select {
		case err := <-res:
			require.ErrorIs(t, err, ErrClosed)
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter of the closed Locker is still waiting")
		}
	}
	sh := tab.shard(tab.hash(0, key))
	sh.mu.Lock()
	assert.Nil(t, sh.scheduler(1), "no scheduler of the closed Locker's clock came back")
	sh.mu.Unlock()

	// A new Locker takes over slot 1; its wait times out by its own clock.
	clk := NewManualClock(start)
	next := newTestLocker(t, db, clk)
	require.Equal(t, 1, next.clockID)
	blocker, err := keep.TryLock(key, Options{})
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		_, err := next.Lock(context.Background(), key, Options{Timeout: time.Second})
		got <- err
	}()
	WaitQueued(t, keep, key, 1)
	clk.Advance(2 * time.Second)
	select {
	case err := <-got:
		require.ErrorIs(t, err, ErrTimeout)
	case <-time.After(10 * time.Second):
		t.Fatal("the wait ran on another clock than its Locker's")
	}
	require.True(t, blocker.Release())
}
