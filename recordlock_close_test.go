package recordlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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
	await(t, entered, "the fence")
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
	await(t, coord.entered, "Acquire")
	require.NoError(t, l.Close())
	r := await(t, got, "Lock")
	require.ErrorIs(t, r.err, recordlock.ErrClosed)
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A round whose admission the coordinator recalled before Lock could join it fails with an error
// that says so, not as a lapsed round.
func TestClusterRoundRevokedDuringAcquire(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	l.SetCoordinator(&blockingCoord{clock: clk, revokeFirst: true})

	_, err := l.Lock(context.Background(), []byte("k"), recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrClusterUnavailable)
	assert.Contains(t, err.Error(), "revoked")
	assert.NotContains(t, err.Error(), "lapsed")
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
	assert.True(t, notReturned(closed), "Close returned while a fenced write of its handle ran")
	close(proceed)
	require.NoError(t, await(t, fenced, "Fence"))
	require.NoError(t, await(t, closed, "Close"))

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
	assert.True(t, notReturned(second), "a second Close returned before the first finished")
	assert.True(t, notReturned(first))
	close(proceed)
	require.NoError(t, await(t, fenced, "Fence"))
	require.NoError(t, await(t, first, "the first Close"))
	require.NoError(t, await(t, second, "the second Close"))
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
		await(t, advanced, "Advance")
		wg.Wait()
		require.NoError(t, holding.Close())
		assert.True(t, recordlock.ProbeTableEmpty(holding))
	}
}
