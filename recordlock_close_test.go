package recordlock_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// How Close ends a Locker: nothing of it stays in flight once Close returns.

// fenceUntil runs a Fence on h in a goroutine whose commit blocks until proceed is closed, and
// returns once the commit is running; fenced gets what Fence returned.
func fenceUntil(t *testing.T, h *recordlock.Handle) (proceed chan struct{}, fenced <-chan error) {
	t.Helper()
	entered, proceed := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- h.Fence(func() error {
			close(entered)
			<-proceed
			return nil
		})
	}()
	testutil.Await(t, entered, "the fence")
	return proceed, done
}

// A cluster Lock waiting on its coordinator when the Locker closes fails at once with ErrClosed:
// Close cancels the request's ctx instead of leaving it to run out the caller's Timeout.
func TestCloseCallsOffClusterRequest(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	coord := &blockingCoord{clock: clk, entered: make(chan struct{})}
	l.SetCoordinator(coord)

	got := lockAsync(context.Background(), l, []byte("k"), recordlock.Options{Timeout: time.Minute})
	testutil.Await(t, coord.entered, "Acquire")
	require.NoError(t, l.Close())
	r := testutil.Await(t, got, "Lock")
	require.ErrorIs(t, r.err, recordlock.ErrClosed)
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// lock, Release, then Fence is valid while the lease lasts; Close waits for such a fence too, so
// that once it returns the application may close the database. A fence begun after Close fails.
func TestCloseWaitsForFenceBegunAfterRelease(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	h, err := l.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err)
	require.True(t, h.Release())

	proceed, fenced := fenceUntil(t, h)
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	assert.True(t, testutil.NotReturned(closed), "Close returned while a fenced write of its handle ran")
	close(proceed)
	require.NoError(t, testutil.Await(t, fenced, "Fence"))
	require.NoError(t, testutil.Await(t, closed, "Close"))

	ran := false
	err = h.Fence(func() error { ran = true; return nil })
	require.ErrorIs(t, err, recordlock.ErrClosed)
	assert.False(t, ran)
}

// Two concurrent Close calls both return only once the Locker is fully closed: here, once the
// fence on a handle it must release has returned.
func TestConcurrentCloseWaitsForTheFirst(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	h, err := l.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err)

	proceed, fenced := fenceUntil(t, h)
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { first <- l.Close() }()
	go func() { second <- l.Close() }()
	assert.True(t, testutil.NotReturned(second), "a second Close returned before the first finished")
	assert.True(t, testutil.NotReturned(first))
	close(proceed)
	require.NoError(t, testutil.Await(t, fenced, "Fence"))
	require.NoError(t, testutil.Await(t, first, "the first Close"))
	require.NoError(t, testutil.Await(t, second, "the second Close"))
	assert.False(t, h.Release(), "Close released the handle")
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A Locker that closes while the timers of its waits fire must not race with them: a timer's
// callback reads the scheduler only under the shard mutex that Close's teardown holds. The
// waiting Locker's clock is the table's first, whose scheduler lives in the shard and is reset in
// place, and many waits share one deadline; -race reports the fault this guards against.
func TestCloseWhileWaitTimersFire(t *testing.T) {
	db := openDB(t)
	const keys = 16
	for round := range 50 {
		waitClock := recordlock.NewManualClock(epoch)
		waiting, err := recordlock.New(db, recordlock.WithClock(waitClock)) // the first clock slot
		require.NoError(t, err)
		_, holding := manual(t, db)
		var wg sync.WaitGroup
		for i := range keys {
			key := []byte{byte(round), byte(i)}
			_, err := holding.TryLock(key, recordlock.Options{})
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := waiting.Lock(context.Background(), key, recordlock.Options{Timeout: 10 * time.Millisecond})
				if !errors.Is(err, recordlock.ErrTimeout) {
					assert.ErrorIs(t, err, recordlock.ErrClosed)
				}
			}()
			waitQueued(t, holding, key, 1)
		}
		advanced := make(chan struct{})
		go func() {
			waitClock.Advance(10 * time.Millisecond)
			close(advanced)
		}()
		require.NoError(t, waiting.Close())
		testutil.Await(t, advanced, "Advance")
		wg.Wait()
		require.NoError(t, holding.Close())
		assert.True(t, recordlock.ProbeTableEmpty(holding))
	}
}

func TestCloseReleasesHandlesAndFailsWaiters(t *testing.T) {
	db := openDB(t)
	clk, a := manual(t, db)
	b := newLocker(t, db, recordlock.WithClock(clk))

	var hooks hookCounter
	held, err := a.TryLock([]byte("held"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	joinHook(t, held, clk, time.Minute, hooks.hook)
	done := held.Done()

	other, err := b.TryLock([]byte("other"), recordlock.Options{})
	require.NoError(t, err)
	waiting := lockAsync(context.Background(), a, []byte("other"), wait)
	waitQueued(t, a, []byte("other"), 1)
	bWaiting := lockAsync(context.Background(), b, []byte("held"), wait)
	waitQueued(t, b, []byte("held"), 1)

	require.NoError(t, a.Close())
	assert.Equal(t, 1, hooks.count(), "Close fires the release hook")
	assert.True(t, testutil.Closed(done))
	assert.True(t, held.IsExpired())
	assert.False(t, held.Release())
	r := testutil.Await(t, waiting, "Lock")
	require.ErrorIs(t, r.err, recordlock.ErrClosed)
	assert.Nil(t, r.h)

	// b was waiting for a's key and now holds it.
	require.True(t, granted(t, bWaiting, "Lock").Release())

	require.NoError(t, a.Close(), "Close is idempotent")
	assert.Equal(t, 1, hooks.count())
	_, err = a.Lock(context.Background(), []byte("x"), recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrClosed)
	_, err = a.TryLock([]byte("x"), recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrClosed)

	// The other Locker keeps working on every key.
	h, err := b.TryLock([]byte("held"), recordlock.Options{})
	require.NoError(t, err)
	require.True(t, h.Release())
	require.True(t, other.Release())
	h, err = b.Lock(context.Background(), []byte("other"), recordlock.Options{})
	require.NoError(t, err)
	require.True(t, h.Release())
	assert.True(t, recordlock.ProbeTableEmpty(b))
}

// TestCloseWhileThousandWait closes a Locker while 1,000 Lock calls wait on a key it holds: every
// one returns ErrClosed within a second although its Timeout is five minutes, the held handle's
// hook fires once, another Locker's waiter queued behind them gets the key, and nothing is left:
// no goroutine, no table entry, no scheduled deadline.
func TestCloseWhileThousandWait(t *testing.T) {
	const waiters = 1000
	base := runtime.NumGoroutine()
	db := openDB(t)
	clk := recordlock.NewManualClock(epoch)
	l := newLocker(t, db, recordlock.WithClock(clk))
	other := newLocker(t, db, recordlock.WithClock(clk))
	key := []byte("busy")
	ctx := context.Background()

	h, err := l.TryLock(key, recordlock.Options{Scope: recordlock.ScopeNode, Lease: recordlock.MaxLease})
	require.NoError(t, err)
	var hooks atomic.Int32
	require.True(t, h.JoinClusterRound(l.Timestamp(), recordlock.MaxLease, clk.Mono(), func() error { hooks.Add(1); return nil }))

	errs := make(chan error, waiters)
	wait := recordlock.Options{Scope: recordlock.ScopeNode, Timeout: recordlock.MaxTimeout}
	for range waiters {
		go func() {
			_, err := l.Lock(ctx, key, wait)
			errs <- err
		}()
	}
	testutil.WaitUntil(t, "1,000 waiters queued", func() bool { return recordlock.ProbeQueuedWaiters(l, key) == waiters })
	survivor := make(chan *recordlock.Handle, 1)
	go func() {
		h, err := other.Lock(ctx, key, wait)
		assert.NoError(t, err)
		survivor <- h
	}()
	testutil.WaitUntil(t, "the other Locker's waiter queued", func() bool { return recordlock.ProbeQueuedWaiters(l, key) == waiters+1 })

	start := time.Now()
	require.NoError(t, l.Close())
	within := time.NewTimer(time.Second)
	defer within.Stop()
	for i := range waiters {
		select {
		case err := <-errs:
			require.ErrorIs(t, err, recordlock.ErrClosed)
		case <-within.C:
			t.Fatalf("%d of %d waiters still blocked a second after Close", waiters-i, waiters)
		}
	}
	t.Logf("%d waiters returned %v after Close", waiters, time.Since(start))

	assert.Equal(t, int32(1), hooks.Load(), "the held handle's hook fires once")
	assert.True(t, h.IsExpired())
	assert.False(t, h.IsLeaseExpired(), "Close releases; it does not revoke")
	h2 := <-survivor
	require.NotNil(t, h2)
	assert.True(t, h2.Release())
	_, err = l.Lock(ctx, key, node)
	require.ErrorIs(t, err, recordlock.ErrClosed)
	assert.True(t, recordlock.ProbeTableEmpty(other))
	assert.Zero(t, recordlock.ProbeDeadlines(other))
	require.NoError(t, other.Close())
	testutil.SettleGoroutines(t, base)
}
