package recordlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

func TestFenceRefusesAfterLeaseEnds(t *testing.T) {
	clk, l := manual(t, openDB(t))
	calls := 0
	commit := func() error { calls++; return nil }

	lapsed, err := l.TryLock([]byte("lapsed"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	revoked, err := l.TryLock([]byte("revoked"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	released, err := l.TryLock([]byte("released"), recordlock.Options{Lease: 2 * time.Second})
	require.NoError(t, err)

	require.NoError(t, lapsed.Fence(commit))
	require.Equal(t, 1, calls)
	boom := errors.New("boom")
	require.ErrorIs(t, lapsed.Fence(func() error { return boom }), boom, "Fence returns commit's error")

	clk.Advance(time.Second)
	require.ErrorIs(t, lapsed.Fence(commit), recordlock.ErrLeaseExpired,
		"Fence refuses once the deadline has passed, whether or not a timer settled the lapse")
	revoked.RevokeLease()
	require.ErrorIs(t, revoked.Fence(commit), recordlock.ErrLeaseExpired, "Fence refuses a revoked lease")
	assert.Equal(t, 1, calls, "a refused Fence does not call commit")

	// After a deliberate Release, Fence still runs while the lease lasts.
	require.True(t, released.Release())
	require.NoError(t, released.Fence(commit))
	assert.Equal(t, 2, calls)
	clk.Advance(time.Second)
	require.ErrorIs(t, released.Fence(commit), recordlock.ErrLeaseExpired)
	assert.Equal(t, 2, calls)
}

// A successor cannot take the key while a fenced commit runs, even once the lease has lapsed;
// it gets the key when commit returns. RevokeLease waits for the commit either way.
func TestFenceHoldsKeyUntilCommitReturns(t *testing.T) {
	for _, lapse := range []bool{false, true} {
		name := map[bool]string{false: "lease live", true: "lease lapsed"}[lapse]
		t.Run(name, func(t *testing.T) {
			clk, l := manual(t, openDB(t))
			key := []byte("k")
			h, err := l.TryLock(key, recordlock.Options{Lease: time.Second})
			require.NoError(t, err)
			var hooks hookCounter
			joinHook(t, h, clk, time.Second, hooks.hook)

			var committed atomic.Bool
			entered, finish := make(chan struct{}), make(chan struct{})
			fenced := make(chan error, 1)
			go func() {
				fenced <- h.Fence(func() error {
					close(entered)
					<-finish
					// The handle's predicates and accessors work inside commit.
					_ = h.IsExpired()
					_ = h.IsLeaseExpired()
					_ = h.Done()
					_ = h.AcquiredAt()
					committed.Store(true)
					return nil
				})
			}()
			<-entered

			successor := make(chan bool, 1)
			go func() {
				h2, err := l.Lock(context.Background(), key, wait)
				successor <- committed.Load()
				if assert.NoError(t, err) {
					h2.Release()
				}
			}()
			waitQueued(t, l, key, 1)

			if lapse {
				clk.Advance(time.Second)
				assert.True(t, testutil.Closed(h.Done()), "Done closes at once")
				assert.True(t, h.IsLeaseExpired())
			}
			_, err = l.TryLock(key, recordlock.Options{})
			require.ErrorIs(t, err, recordlock.ErrLocked)
			assert.Equal(t, 1, recordlock.ProbeQueuedWaiters(l, key), "the successor still waits")
			assert.Equal(t, 0, hooks.count(), "the key has not passed on")

			revoked := make(chan bool, 1)
			go func() {
				h.RevokeLease()
				revoked <- committed.Load()
			}()
			time.Sleep(20 * time.Millisecond) // give a RevokeLease that fails to wait the chance to return
			close(finish)

			require.NoError(t, <-fenced)
			assert.True(t, <-revoked, "RevokeLease returned while the fenced commit ran")
			assert.True(t, <-successor, "the successor acquired while the fenced commit ran")
			assert.Equal(t, 1, hooks.count())
			assert.True(t, h.IsLeaseExpired())
		})
	}
}

// Release from another goroutine waits for a running Fence.
func TestReleaseWaitsForFence(t *testing.T) {
	_, l := manual(t, openDB(t))
	h, err := l.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err)
	var committed atomic.Bool
	entered, finish := make(chan struct{}), make(chan struct{})
	fenced := make(chan error, 1)
	go func() {
		fenced <- h.Fence(func() error {
			close(entered)
			<-finish
			committed.Store(true)
			return nil
		})
	}()
	<-entered
	released := make(chan bool, 1)
	go func() {
		ok := h.Release()
		released <- ok && committed.Load()
	}()
	time.Sleep(20 * time.Millisecond) // give a Release that fails to wait the chance to return
	close(finish)
	require.NoError(t, <-fenced)
	assert.True(t, <-released, "Release from another goroutine waits for the running commit to return")
}

// A lease that lapses inside Fence passes the key on when commit returns and fires the release
// hook. The hook runs after Fence has let go of the handle, so a hook that uses the handle again
// (here: Fence, which must refuse) does not deadlock.
func TestFenceReleaseHookRunsAfterFenceLetsGo(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	h, err := l.Lock(context.Background(), []byte("k"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	hookFence := make(chan error, 1)
	joinHook(t, h, clk, time.Second, func() error {
		hookFence <- h.Fence(func() error { return nil })
		return nil
	})
	fenceDone := make(chan error, 1)
	go func() {
		fenceDone <- h.Fence(func() error {
			clk.Advance(2 * time.Second) // the lease lapses while the commit runs
			return nil
		})
	}()
	require.NoError(t, testutil.Await(t, fenceDone, "Fence running a release hook that uses the handle"))
	require.ErrorIs(t, <-hookFence, recordlock.ErrLeaseExpired)
}

// TestReleaseHookFiredByFenceMayCallFence is the regression test for what
// TestReleaseHookCallingBackIntoLocker caught: a release hook fired by Fence itself (the lease
// lapsed inside commit, or Fence found it lapsed) ran while Fence still held the handle's fence
// mutex, so a hook that called Fence on its handle deadlocked.
func TestReleaseHookFiredByFenceMayCallFence(t *testing.T) {
	for _, lazy := range []bool{false, true} {
		t.Run(fmt.Sprintf("found lazily=%v", lazy), func(t *testing.T) {
			db := openDB(t)
			clk := recordlock.NewManualClock(epoch)
			var c recordlock.Clock = clk
			if lazy {
				c = frozenTimers{clk}
			}
			l := newLocker(t, db, recordlock.WithClock(c))
			h, err := l.TryLock([]byte("k"), node)
			require.NoError(t, err)
			var inner error
			require.True(t, h.JoinClusterRound(l.Timestamp(), recordlock.MinLease, clk.Mono(), func() error {
				inner = h.Fence(func() error { return nil })
				return nil
			}))
			done := make(chan error, 1)
			go func() {
				if lazy {
					clk.Advance(time.Second) // no timer runs: Fence finds the lapse itself
					done <- h.Fence(func() error { return nil })
					return
				}
				done <- h.Fence(func() error { clk.Advance(time.Second); return nil })
			}()
			err = testutil.Await(t, done, "Fence firing a release hook that calls Fence")
			if lazy {
				require.ErrorIs(t, err, recordlock.ErrLeaseExpired)
			} else {
				require.NoError(t, err)
			}
			require.ErrorIs(t, inner, recordlock.ErrLeaseExpired)
			assert.True(t, recordlock.ProbeTableEmpty(l))
		})
	}
}
