package recordlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

func TestHandleAccessors(t *testing.T) {
	clk, l := manual(t, openDB(t))
	last := l.Timestamp()
	clk.StepWall(-time.Hour) // AcquiredAt now runs ahead of the wall clock

	h, err := l.TryLock([]byte("k"), recordlock.Options{Lease: 2 * time.Second, Hold: true})
	require.NoError(t, err)
	assert.Equal(t, []byte("k"), h.Key())
	assert.Equal(t, recordlock.ScopeNode, h.Scope())
	assert.True(t, h.Hold())
	assert.Equal(t, last+1, h.AcquiredAt())
	assert.True(t, h.ExpiresAt().Equal(clk.Now().Add(2*time.Second)), "ExpiresAt is Now()+lease, not AcquiredAt+lease")
	_, ok := h.ClusterTsR()
	assert.False(t, ok)
	assert.Zero(t, h.Token())
	assert.False(t, recordlock.ProbeClosed(h.Done()))
	require.True(t, h.Release())

	h, err = l.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err)
	assert.False(t, h.Hold())
	assert.True(t, h.ExpiresAt().Equal(clk.Now().Add(recordlock.DefaultLease)))
	require.True(t, h.Release())
}

func TestStalledHolderLosesKeyAtDeadline(t *testing.T) {
	clk, l := manual(t, openDB(t))
	key := []byte("k")
	h, err := l.TryLock(key, recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	done := h.Done()
	got := lockAsync(context.Background(), l, key, wait)
	waitQueued(t, l, key, 1)

	clk.Advance(time.Second - time.Nanosecond)
	assert.Equal(t, 1, recordlock.ProbeQueuedWaiters(l, key))
	assert.False(t, recordlock.ProbeClosed(done))

	clk.Advance(time.Nanosecond) // the holder calls nothing: the lease timer gives the key on
	r := await(t, got, "Lock")
	require.NoError(t, r.err)
	assert.True(t, recordlock.ProbeClosed(done))
	assert.False(t, h.Release())
	assert.True(t, h.IsExpired())
	assert.True(t, h.IsLeaseExpired())
	assert.False(t, r.h.IsExpired())
	require.True(t, r.h.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

func TestWallClockStepMovesNoDeadline(t *testing.T) {
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(step.String(), func(t *testing.T) {
			clk, l := manual(t, openDB(t))
			key := []byte("k")
			h, err := l.TryLock(key, recordlock.Options{Lease: time.Second})
			require.NoError(t, err)
			expiresAt := h.ExpiresAt()
			// A waiter's timeout runs on the monotonic clock too.
			other, err := l.TryLock([]byte("other"), recordlock.Options{Lease: time.Minute})
			require.NoError(t, err)
			timeout := lockAsync(context.Background(), l, []byte("other"), recordlock.Options{Timeout: 2 * time.Second})
			waitQueued(t, l, []byte("other"), 1)

			clk.StepWall(step)
			assert.False(t, h.IsExpired())
			assert.False(t, h.IsLeaseExpired())
			assert.True(t, h.ExpiresAt().Equal(expiresAt))
			clk.Advance(time.Second - time.Nanosecond)
			assert.False(t, h.IsLeaseExpired(), "a forward step shortened the lease")
			assert.Equal(t, 1, recordlock.ProbeQueuedWaiters(l, []byte("other")))
			clk.Advance(time.Nanosecond)
			assert.True(t, h.IsLeaseExpired(), "a backward step extended the lease")

			clk.StepWall(-step)
			clk.Advance(time.Second - time.Nanosecond)
			assert.Equal(t, 1, recordlock.ProbeQueuedWaiters(l, []byte("other")))
			clk.Advance(time.Nanosecond)
			require.ErrorIs(t, await(t, timeout, "Lock").err, recordlock.ErrTimeout)
			require.True(t, other.Release())
		})
	}
}

// With timers that never fire, IsExpired (and every other lazy check) completes the expiry itself.
func TestLazyExpiryWithoutTimers(t *testing.T) {
	clk := frozenTimers{recordlock.NewManualClock(epoch)}
	db := openDB(t)
	l := newLocker(t, db, recordlock.WithClock(clk))
	other := newLocker(t, db, recordlock.WithClock(clk))

	checks := map[string]func(h *recordlock.Handle){
		"IsExpired":      func(h *recordlock.Handle) { assert.True(t, h.IsExpired()) },
		"IsLeaseExpired": func(h *recordlock.Handle) { assert.True(t, h.IsLeaseExpired()) },
		"Release":        func(h *recordlock.Handle) { assert.False(t, h.Release()) },
		"Done":           func(h *recordlock.Handle) { assert.True(t, recordlock.ProbeClosed(h.Done())) },
	}
	for name, check := range checks {
		t.Run(name, func(t *testing.T) {
			key := []byte(name)
			h, err := l.TryLock(key, recordlock.Options{Lease: time.Second})
			require.NoError(t, err)
			var hooks hookCounter
			joinHook(t, h, clk, time.Second, hooks.hook)

			clk.Advance(time.Second)
			require.False(t, recordlock.ProbeTableEmpty(l), "no timer ran: the key is still in the table")
			require.Equal(t, 0, hooks.count())

			check(h)
			assert.Equal(t, 1, hooks.count(), "the lazy check fired the release hook")
			assert.True(t, recordlock.ProbeTableEmpty(l), "the lazy check gave the key back")
			assert.True(t, h.IsExpired())
			assert.Equal(t, 1, hooks.count())

			h2, err := other.TryLock(key, recordlock.Options{})
			require.NoError(t, err)
			require.True(t, h2.Release())
		})
	}
}

// Acquiring a key whose holder's deadline passed completes that holder's expiry first.
func TestAcquireSettlesLapsedHolder(t *testing.T) {
	clk := frozenTimers{recordlock.NewManualClock(epoch)}
	l := newLocker(t, openDB(t), recordlock.WithClock(clk))
	key := []byte("k")
	h, err := l.TryLock(key, recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	var hooks hookCounter
	joinHook(t, h, clk, time.Second, hooks.hook)
	clk.Advance(time.Second)

	h2, err := l.TryLock(key, recordlock.Options{})
	require.NoError(t, err)
	assert.Equal(t, 1, hooks.count())
	assert.True(t, h.IsLeaseExpired())
	require.True(t, h2.Release())
}

func TestReleaseThenLeasePredicates(t *testing.T) {
	clk, l := manual(t, openDB(t))
	h, err := l.TryLock([]byte("k"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	done := h.Done()
	require.True(t, h.Release())
	assert.False(t, h.Release(), "only the first Release is true")
	assert.True(t, recordlock.ProbeClosed(done))
	assert.True(t, h.IsExpired(), "a released handle authorizes no new write")
	assert.False(t, h.IsLeaseExpired(), "a write staged before Release stays valid until the deadline")

	clk.Advance(time.Second - time.Nanosecond)
	assert.False(t, h.IsLeaseExpired())
	clk.Advance(time.Nanosecond)
	assert.True(t, h.IsLeaseExpired())
	assert.True(t, h.IsExpired())
	clk.Advance(time.Hour)
	assert.True(t, h.IsLeaseExpired(), "true for good")
}

func TestRevokeLeaseOnHeldHandle(t *testing.T) {
	clk, l := manual(t, openDB(t))
	key := []byte("k")
	h, err := l.TryLock(key, recordlock.Options{})
	require.NoError(t, err)
	var hooks hookCounter
	joinHook(t, h, clk, time.Minute, hooks.hook)
	got := lockAsync(context.Background(), l, key, wait)
	waitQueued(t, l, key, 1)

	h.RevokeLease()
	assert.Equal(t, 1, hooks.count())
	assert.True(t, h.IsLeaseExpired())
	assert.True(t, h.IsExpired())
	assert.True(t, recordlock.ProbeClosed(h.Done()))
	r := await(t, got, "Lock")
	require.NoError(t, r.err, "the revoked key went to the waiter")

	h.RevokeLease()
	assert.False(t, h.Release())
	assert.Equal(t, 1, hooks.count(), "the hook fires once")
	assert.False(t, r.h.IsExpired(), "revoking again leaves the successor alone")
	require.True(t, r.h.Release())
}

func TestRevokeLeaseAfterRelease(t *testing.T) {
	clk, l := manual(t, openDB(t))
	key := []byte("k")
	h, err := l.TryLock(key, recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	var hooks hookCounter
	joinHook(t, h, clk, time.Minute, hooks.hook)
	require.True(t, h.Release())
	require.Equal(t, 1, hooks.count(), "Release fires the hook")
	require.False(t, h.IsLeaseExpired())

	successor, err := l.TryLock(key, recordlock.Options{})
	require.NoError(t, err)
	h.RevokeLease()
	assert.True(t, h.IsLeaseExpired(), "revocation fences writes staged before Release")
	assert.Equal(t, 1, hooks.count(), "and fires nothing")
	assert.False(t, successor.IsExpired())
	_, err = l.TryLock(key, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked)
	require.True(t, successor.Release())
}

func TestJoinClusterRoundRefusals(t *testing.T) {
	clk, l := manual(t, openDB(t))
	ts := func() recordlock.Timestamp { return recordlock.Timestamp(clk.Now().UnixNano()) }
	nop := func() error { return nil }

	t.Run("lapsed lease", func(t *testing.T) {
		h, err := l.TryLock([]byte("lapsed"), recordlock.Options{Lease: time.Second})
		require.NoError(t, err)
		clk.Advance(time.Second)
		assert.False(t, h.JoinClusterRound(ts(), time.Minute, clk.Mono(), nop))
	})
	t.Run("released", func(t *testing.T) {
		h, err := l.TryLock([]byte("released"), recordlock.Options{})
		require.NoError(t, err)
		require.True(t, h.Release())
		assert.False(t, h.JoinClusterRound(ts(), time.Minute, clk.Mono(), nop))
	})
	t.Run("revoked", func(t *testing.T) {
		h, err := l.TryLock([]byte("revoked"), recordlock.Options{})
		require.NoError(t, err)
		h.RevokeLease()
		assert.False(t, h.JoinClusterRound(ts(), time.Minute, clk.Mono(), nop))
	})
	t.Run("round minted a full lease ago", func(t *testing.T) {
		h, err := l.TryLock([]byte("old round"), recordlock.Options{Lease: time.Minute})
		require.NoError(t, err)
		acquiredAt, expiresAt := h.AcquiredAt(), h.ExpiresAt()
		minted := clk.Mono()
		clk.Advance(200 * time.Millisecond)
		var hooks hookCounter
		assert.False(t, h.JoinClusterRound(ts(), 200*time.Millisecond, minted, hooks.hook))
		// Nothing changed.
		_, ok := h.ClusterTsR()
		assert.False(t, ok)
		assert.Equal(t, acquiredAt, h.AcquiredAt())
		assert.True(t, h.ExpiresAt().Equal(expiresAt))
		assert.Equal(t, recordlock.ScopeNode, h.Scope())
		assert.False(t, h.IsExpired())
		require.True(t, h.Release())
		assert.Equal(t, 0, hooks.count(), "a refused round's hook is not installed")

		// A round with a nanosecond left is still joined.
		h, err = l.TryLock([]byte("old round"), recordlock.Options{Lease: time.Minute})
		require.NoError(t, err)
		minted = clk.Mono()
		clk.Advance(200*time.Millisecond - time.Nanosecond)
		assert.True(t, h.JoinClusterRound(ts(), 200*time.Millisecond, minted, hooks.hook))
		clk.Advance(time.Nanosecond)
		assert.True(t, h.IsLeaseExpired())
		assert.Equal(t, 1, hooks.count())
	})
}

func TestJoinClusterRound(t *testing.T) {
	clk, l := manual(t, openDB(t))
	key := []byte("k")
	h, err := l.TryLock(key, recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	h.NoteHolderVersion(h.AcquiredAt() + recordlock.Timestamp(time.Hour))
	require.Greater(t, h.HolderVersionCandidate(0), h.AcquiredAt())

	minted := clk.Mono()
	clk.Advance(50 * time.Millisecond)
	tsR := recordlock.Timestamp(clk.Now().UnixNano())
	var hooks hookCounter
	require.True(t, h.JoinClusterRound(tsR, 200*time.Millisecond, minted, hooks.hook))

	got, ok := h.ClusterTsR()
	assert.True(t, ok)
	assert.Equal(t, tsR, got)
	assert.Equal(t, tsR, h.AcquiredAt())
	assert.Equal(t, recordlock.ScopeCluster, h.Scope())
	assert.True(t, h.ExpiresAt().Equal(tsR.Time().Add(200*time.Millisecond)))
	assert.Equal(t, tsR, h.HolderVersionCandidate(0), "the version counter restarts at tsR")

	// The deadline is mintedMono+lease exactly; the timer was re-armed for it.
	waiting := lockAsync(context.Background(), l, key, wait)
	waitQueued(t, l, key, 1)
	clk.Advance(150*time.Millisecond - time.Nanosecond)
	assert.False(t, h.IsLeaseExpired())
	assert.Equal(t, 1, recordlock.ProbeQueuedWaiters(l, key))
	clk.Advance(time.Nanosecond)
	r := await(t, waiting, "Lock")
	require.NoError(t, r.err)
	assert.Equal(t, 1, hooks.count(), "the round's release hook fired at the deadline")
	assert.True(t, h.IsLeaseExpired())
	require.True(t, r.h.Release())
}

// A round stamped 10 s ahead of this node's wall clock lapses after its lease of Mono, however
// far the wall clock is behind.
func TestJoinClusterRoundAheadOfWallClock(t *testing.T) {
	clk, l := manual(t, openDB(t))
	h, err := l.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err)
	var hooks hookCounter
	tsR := recordlock.Timestamp(clk.Now().Add(10 * time.Second).UnixNano())
	require.True(t, h.JoinClusterRound(tsR, 200*time.Millisecond, clk.Mono(), hooks.hook))
	assert.True(t, h.ExpiresAt().Equal(clk.Now().Add(10*time.Second+200*time.Millisecond)))
	done := h.Done()

	clk.Advance(200*time.Millisecond - time.Nanosecond)
	assert.False(t, recordlock.ProbeClosed(done))
	clk.Advance(time.Nanosecond)
	assert.True(t, recordlock.ProbeClosed(done), "the timer ended the lease")
	assert.Equal(t, 1, hooks.count())
	assert.True(t, h.IsLeaseExpired())
}

func TestUpgradeToHoldExtendsNodeLease(t *testing.T) {
	clk, l := manual(t, openDB(t))
	h, err := l.TryLock([]byte("k"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	require.False(t, h.Hold())
	clk.Advance(500 * time.Millisecond)
	v := h.HolderVersionCandidate(0)

	require.NoError(t, h.UpgradeToHold(2*time.Second))
	assert.True(t, h.Hold())
	assert.Equal(t, v+1, h.HolderVersionCandidate(0), "the version counter advanced once")
	assert.True(t, h.ExpiresAt().Equal(clk.Now().Add(2*time.Second)))

	clk.Advance(2*time.Second - time.Nanosecond)
	assert.False(t, h.IsExpired(), "the lease was extended past its first deadline")
	clk.Advance(time.Nanosecond)
	assert.True(t, h.IsLeaseExpired())
}

func TestUpgradeToHoldDefaultLease(t *testing.T) {
	clk, l := manual(t, openDB(t))
	h, err := l.TryLock([]byte("k"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	require.NoError(t, h.UpgradeToHold(0))
	clk.Advance(recordlock.DefaultLease - time.Nanosecond)
	assert.False(t, h.IsExpired())
	clk.Advance(time.Nanosecond)
	assert.True(t, h.IsExpired())
}

// TestUpgradeToHoldClampedToRound: under a cluster round, an upgrade's new deadline is capped by
// the round's deadline, and ExpiresAt is then the round's too. The cap is the round's, not the
// handle's current deadline: after an upgrade has shortened the lease, a later longer upgrade
// reaches the round's deadline again (FuzzOps seed testdata/fuzz/FuzzOps/upgrade-clamp-round).
func TestUpgradeToHoldClampedToRound(t *testing.T) {
	clk, l := manual(t, openDB(t))
	h, err := l.TryLock([]byte("k"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	tsR := recordlock.Timestamp(clk.Now().Add(10 * time.Second).UnixNano())
	require.True(t, h.JoinClusterRound(tsR, time.Second, clk.Mono(), nil))
	roundExpiresAt := tsR.Time().Add(time.Second)
	clk.Advance(100 * time.Millisecond)
	v := h.HolderVersionCandidate(0)

	require.NoError(t, h.UpgradeToHold(time.Minute))
	assert.True(t, h.Hold())
	assert.Equal(t, v+1, h.HolderVersionCandidate(0), "the version counter advanced once")
	assert.True(t, h.ExpiresAt().Equal(roundExpiresAt), "ExpiresAt %v, want the round's wall(tsR)+lease", h.ExpiresAt())

	require.NoError(t, h.UpgradeToHold(recordlock.MinLease)) // shorter than the round: not clamped
	assert.True(t, h.ExpiresAt().Equal(clk.Now().Add(recordlock.MinLease)), "ExpiresAt %v", h.ExpiresAt())
	require.NoError(t, h.UpgradeToHold(time.Minute))
	assert.True(t, h.ExpiresAt().Equal(roundExpiresAt), "ExpiresAt %v, want the round's again", h.ExpiresAt())

	clk.Advance(recordlock.MinLease) // past where the shortened lease would have ended
	assert.False(t, h.IsLeaseExpired(), "the last upgrade runs to the round's deadline")
	clk.Advance(800*time.Millisecond - time.Nanosecond) // 1 ns before the round's deadline
	assert.False(t, h.IsExpired())
	clk.Advance(time.Nanosecond)
	assert.True(t, h.IsLeaseExpired(), "a granted round is never extended locally")
}

func TestUpgradeToHoldErrors(t *testing.T) {
	clk, l := manual(t, openDB(t))
	lock := func(key string) *recordlock.Handle {
		h, err := l.TryLock([]byte(key), recordlock.Options{Lease: time.Second})
		require.NoError(t, err)
		return h
	}

	released := lock("released")
	require.True(t, released.Release())
	require.ErrorIs(t, released.UpgradeToHold(time.Minute), recordlock.ErrReleased)
	assert.False(t, released.Hold())

	revoked := lock("revoked")
	revoked.RevokeLease()
	require.ErrorIs(t, revoked.UpgradeToHold(time.Minute), recordlock.ErrLeaseExpired)

	live := lock("live")
	err := live.UpgradeToHold(time.Millisecond)
	require.ErrorIs(t, err, recordlock.ErrInvalidOptions)
	var oe *recordlock.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "Lease", oe.Field)
	assert.False(t, live.Hold(), "a failed upgrade changes nothing")
	require.ErrorIs(t, live.UpgradeToHold(-time.Second), recordlock.ErrInvalidOptions)
	require.ErrorIs(t, live.UpgradeToHold(time.Hour), recordlock.ErrInvalidOptions)

	lapsed := lock("lapsed")
	clk.Advance(time.Second)
	require.ErrorIs(t, lapsed.UpgradeToHold(time.Minute), recordlock.ErrLeaseExpired)
	assert.False(t, lapsed.Hold())
	assert.True(t, live.IsExpired())
}

func TestHolderVersions(t *testing.T) {
	_, l := manual(t, openDB(t))
	h, err := l.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err)
	a := h.AcquiredAt()

	assert.Equal(t, a, h.HolderVersionCandidate(0), "the first candidate is AcquiredAt")
	assert.Equal(t, a+100, h.HolderVersionCandidate(a+100), "a floor raises the candidate")
	assert.Equal(t, a, h.HolderVersionCandidate(a-100), "never below AcquiredAt")
	assert.Equal(t, a, h.HolderVersionCandidate(0), "a candidate changes nothing")

	assert.Equal(t, a, h.NextHolderVersion())
	assert.Equal(t, a+1, h.NextHolderVersion())
	assert.Equal(t, a+2, h.HolderVersionCandidate(0))

	h.NoteCandidateFloor(a + 50)
	assert.Equal(t, a+50, h.HolderVersionCandidate(0))
	h.NoteCandidateFloor(a + 10)
	assert.Equal(t, a+50, h.HolderVersionCandidate(0), "the floor never lowers")
	assert.Equal(t, a+50, h.NextHolderVersion())
	assert.Equal(t, a+51, h.NextHolderVersion(), "the floor alone is not a write")

	h.NoteHolderVersion(a + 10)
	assert.Equal(t, a+52, h.HolderVersionCandidate(0), "noting a lower version never lowers it")
	h.NoteHolderVersion(a + 1000)
	assert.Equal(t, a+1001, h.HolderVersionCandidate(0))
	assert.Equal(t, a+2000, h.HolderVersionCandidate(a+2000))
	assert.Equal(t, a+1001, h.NextHolderVersion())
	require.True(t, h.Release())

	// Noting a version on a fresh handle counts as issued.
	h, err = l.TryLock([]byte("k2"), recordlock.Options{})
	require.NoError(t, err)
	b := h.AcquiredAt()
	h.NoteHolderVersion(b + 5)
	assert.Equal(t, b+6, h.NextHolderVersion())
	require.True(t, h.Release())
}

func TestReleaseHookFailuresAreContainedAndRateLimited(t *testing.T) {
	db := openDB(t)
	logs := &recordlock.LogCapture{}
	clk, l := manual(t, db, recordlock.WithLogger(slog.New(logs)))
	panicky := func() error { panic("hook exploded") }
	failing := func() error { return errors.New("hook failed") }
	n := 0
	lock := func(hook func() error, lease time.Duration) *recordlock.Handle {
		n++
		h, err := l.TryLock([]byte{byte(n)}, recordlock.Options{Lease: lease})
		require.NoError(t, err)
		joinHook(t, h, clk, lease, hook)
		return h
	}

	// At 0 s: the first failure of each kind is logged; Release still reports success.
	assert.True(t, lock(panicky, time.Minute).Release())
	assert.True(t, lock(failing, time.Minute).Release())
	h := lock(panicky, time.Minute)
	h.RevokeLease()
	assert.Equal(t, []string{"panic", "error"}, logs.Kinds())
	recs := logs.Records()
	assert.Equal(t, "WARN", recs[0].Level)
	assert.Contains(t, recs[0].Attrs["err"], "hook exploded")
	assert.Contains(t, recs[1].Attrs["err"], "hook failed")

	// Within 60 s further failures are not logged, from any path.
	stalled := lock(panicky, 60*time.Second) // its lease timer runs the hook at 60 s
	clk.Advance(59 * time.Second)
	assert.True(t, lock(failing, time.Minute).Release())
	assert.True(t, lock(panicky, time.Minute).Release())
	assert.Equal(t, []string{"panic", "error"}, logs.Kinds())

	// At 60 s, a persisting fault is reported again: the lease timer's hook panics inside Advance
	// (the timer's goroutine) without escaping.
	clk.Advance(time.Second)
	assert.True(t, stalled.IsLeaseExpired())
	assert.Equal(t, []string{"panic", "error", "panic"}, logs.Kinds())
	assert.True(t, lock(failing, time.Minute).Release())
	assert.Equal(t, []string{"panic", "error", "panic", "error"}, logs.Kinds())

	// The limit is per Locker.
	other := newLocker(t, db, recordlock.WithClock(clk), recordlock.WithLogger(slog.New(logs)))
	h2, err := other.TryLock([]byte("other"), recordlock.Options{})
	require.NoError(t, err)
	joinHook(t, h2, clk, time.Minute, failing)
	assert.True(t, h2.Release())
	assert.Equal(t, []string{"panic", "error", "panic", "error", "error"}, logs.Kinds())
}

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
	require.ErrorIs(t, lapsed.Fence(commit), recordlock.ErrLeaseExpired)
	revoked.RevokeLease()
	require.ErrorIs(t, revoked.Fence(commit), recordlock.ErrLeaseExpired)
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
				assert.True(t, recordlock.ProbeClosed(h.Done()), "Done closes at once")
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
	assert.True(t, <-released)
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
	select {
	case err := <-fenceDone:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Fence deadlocked running a release hook that uses the handle")
	}
	require.ErrorIs(t, <-hookFence, recordlock.ErrLeaseExpired)
}

// TestTimersExpireStalledHoldersInDeadlineOrder takes 300 keys with leases in shuffled order, so
// that every shard's deadline heap sees deadlines arrive earlier and later than its head, and
// releases a third of them early. Then it moves the clock one step at a time: each remaining lease
// must end exactly at the step of its deadline, by the shard timers alone (nothing else is called
// on the handles).
func TestTimersExpireStalledHoldersInDeadlineOrder(t *testing.T) {
	clk, l := manual(t, openDB(t))
	const n, steps = 300, 50
	step := 100 * time.Millisecond
	rng := rand.New(rand.NewPCG(1, 2))
	type held struct {
		h        *recordlock.Handle
		done     <-chan struct{}
		lease    time.Duration
		released bool
		endedAt  time.Duration // elapsed time at which done was first seen closed, -1 before
	}
	key := func(i int) []byte { return fmt.Appendf(nil, "record/%d", i) }
	hs := make([]held, n)
	for i, p := range rng.Perm(n) {
		lease := recordlock.MinLease + time.Duration(p%steps)*step
		h, err := l.TryLock(key(i), recordlock.Options{Lease: lease, Scope: recordlock.ScopeNode})
		require.NoError(t, err)
		hs[i] = held{h: h, done: h.Done(), lease: lease, endedAt: -1}
	}
	for i := 0; i < n; i += 3 {
		require.True(t, hs[i].h.Release())
		hs[i].released = true
	}

	for elapsed := time.Duration(0); elapsed <= recordlock.MinLease+steps*step; elapsed += step {
		for i := range hs {
			if x := &hs[i]; !x.released && x.endedAt < 0 && recordlock.ProbeClosed(x.done) {
				x.endedAt = elapsed
			}
		}
		clk.Advance(step)
	}
	for i, x := range hs {
		if !x.released {
			assert.Equal(t, x.lease, x.endedAt, "key %d: its lease ended at the wrong step", i)
		}
		assert.True(t, recordlock.ProbeClosed(x.done), "key %d", i)
		assert.False(t, x.h.Release(), "key %d: released before, or its lease lapsed", i)
	}
	for i := range n {
		h, err := l.TryLock(key(i), recordlock.Options{Scope: recordlock.ScopeNode})
		require.NoError(t, err, "key %d is free again", i)
		require.True(t, h.Release())
	}
	assert.True(t, recordlock.ProbeTableEmpty(l))
}
