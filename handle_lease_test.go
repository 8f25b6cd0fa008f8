package recordlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

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
	assert.False(t, testutil.Closed(done))

	clk.Advance(time.Nanosecond) // the holder calls nothing: the lease timer gives the key on
	r := testutil.Await(t, got, "Lock")
	require.NoError(t, r.err)
	assert.True(t, testutil.Closed(done))
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
			require.ErrorIs(t, testutil.Await(t, timeout, "Lock").err, recordlock.ErrTimeout)
			require.True(t, other.Release())
		})
	}
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

// A round never grants more than the lock asked for: the lease it was taken with, or last renewed
// or upgraded to, as asked.
func TestJoinClusterRoundNoLongerThanTheLock(t *testing.T) {
	clk, l := manual(t, openDB(t))
	ts := func() recordlock.Timestamp { return recordlock.Timestamp(clk.Now().UnixNano()) }

	t.Run("longer round refused, changing nothing", func(t *testing.T) {
		h, err := l.TryLock([]byte("day"), recordlock.Options{Lease: time.Second, Scope: recordlock.ScopeNode})
		require.NoError(t, err)
		acquiredAt, expiresAt := h.AcquiredAt(), h.ExpiresAt()
		var hooks hookCounter
		assert.False(t, h.JoinClusterRound(ts(), 24*time.Hour, clk.Mono(), hooks.hook))
		assert.False(t, h.JoinClusterRound(ts(), time.Second+time.Nanosecond, clk.Mono(), hooks.hook))
		_, ok := h.ClusterTsR()
		assert.False(t, ok)
		assert.Equal(t, recordlock.ScopeNode, h.Scope())
		assert.Equal(t, acquiredAt, h.AcquiredAt())
		assert.True(t, h.ExpiresAt().Equal(expiresAt))
		clk.Advance(time.Second - time.Nanosecond)
		assert.False(t, h.IsLeaseExpired())
		clk.Advance(time.Nanosecond)
		assert.True(t, h.IsLeaseExpired(), "the lease still ends a second after the lock")
		assert.Equal(t, 0, hooks.count(), "a refused round's hook is not installed")
	})
	t.Run("equal round joined", func(t *testing.T) {
		h, err := l.TryLock([]byte("equal"), recordlock.Options{Lease: time.Second})
		require.NoError(t, err)
		tsR := ts()
		require.True(t, h.JoinClusterRound(tsR, time.Second, clk.Mono(), nil))
		got, ok := h.ClusterTsR()
		assert.True(t, ok)
		assert.Equal(t, tsR, got)
		require.True(t, h.Release())
	})
	t.Run("lease that is no whole number of microseconds", func(t *testing.T) {
		lease := time.Second + time.Nanosecond
		h, err := l.TryLock([]byte("odd"), recordlock.Options{Lease: lease})
		require.NoError(t, err)
		assert.False(t, h.JoinClusterRound(ts(), lease+time.Nanosecond, clk.Mono(), nil))
		assert.True(t, h.JoinClusterRound(ts(), lease, clk.Mono(), nil))
		require.True(t, h.Release())
	})
	t.Run("longest lease", func(t *testing.T) {
		h, err := l.TryLock([]byte("max"), recordlock.Options{Lease: recordlock.MaxLease})
		require.NoError(t, err)
		assert.False(t, h.JoinClusterRound(ts(), recordlock.MaxLease+time.Nanosecond, clk.Mono(), nil))
		assert.True(t, h.JoinClusterRound(ts(), recordlock.MaxLease, clk.Mono(), nil))
		require.True(t, h.Release())
	})
	for _, tc := range []struct {
		name   string
		extend func(*recordlock.Handle, time.Duration) error
	}{
		{"Renew", (*recordlock.Handle).Renew},
		{"UpgradeToHold", (*recordlock.Handle).UpgradeToHold},
	} {
		t.Run("after "+tc.name, func(t *testing.T) {
			h, err := l.TryLock([]byte(tc.name), recordlock.Options{Lease: time.Second})
			require.NoError(t, err)
			require.NoError(t, tc.extend(h, time.Minute))
			assert.False(t, h.JoinClusterRound(ts(), time.Minute+time.Nanosecond, clk.Mono(), nil))
			require.True(t, h.JoinClusterRound(ts(), time.Minute, clk.Mono(), nil))

			// Under the round a longer lease is clamped to the round's deadline, but the lease
			// asked for is what bounds the next round.
			require.NoError(t, tc.extend(h, 2*time.Minute))
			assert.False(t, h.JoinClusterRound(ts(), 2*time.Minute+time.Nanosecond, clk.Mono(), nil))
			require.True(t, h.JoinClusterRound(ts(), 2*time.Minute, clk.Mono(), nil))

			// A shorter lease asked for lowers the bound.
			require.NoError(t, tc.extend(h, time.Second))
			assert.False(t, h.JoinClusterRound(ts(), 2*time.Second, clk.Mono(), nil))
			assert.True(t, h.JoinClusterRound(ts(), time.Second, clk.Mono(), nil))

			// A failed renewal changes nothing.
			require.ErrorIs(t, tc.extend(h, time.Hour), recordlock.ErrInvalidOptions)
			assert.False(t, h.JoinClusterRound(ts(), time.Hour, clk.Mono(), nil))
			require.True(t, h.Release())
		})
	}
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
	r := testutil.Await(t, waiting, "Lock")
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
	assert.False(t, testutil.Closed(done))
	clk.Advance(time.Nanosecond)
	assert.True(t, testutil.Closed(done), "the timer ended the lease")
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

// UpgradeToHold(0) and Renew(0) mean DefaultLease.
func TestZeroLeaseMeansDefault(t *testing.T) {
	for name, extend := range map[string]func(*recordlock.Handle) error{
		"UpgradeToHold": func(h *recordlock.Handle) error { return h.UpgradeToHold(0) },
		"Renew":         func(h *recordlock.Handle) error { return h.Renew(0) },
	} {
		t.Run(name, func(t *testing.T) {
			clk, l := manual(t, openDB(t))
			h, err := l.TryLock([]byte("k"), recordlock.Options{Lease: time.Second})
			require.NoError(t, err)
			require.NoError(t, extend(h))
			clk.Advance(recordlock.DefaultLease - time.Nanosecond)
			assert.False(t, h.IsExpired())
			clk.Advance(time.Nanosecond)
			assert.True(t, h.IsExpired())
			assert.True(t, h.IsLeaseExpired())
		})
	}
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

// Renew keeps a stalled lock alive: the deadline moves to now plus the lease, a waiter keeps
// waiting, and the Txn still commits; it sets no Hold and no version, so the lock ends with the
// Txn.
func TestRenewKeepsAStalledLockAlive(t *testing.T) {
	db, clk, l, other := lockerPair(t)
	ctx := context.Background()
	key := []byte("k")

	txn := l.Begin()
	defer txn.Rollback()
	h, err := txn.Lock(ctx, key, recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	acquired, version := h.AcquiredAt(), h.HolderVersionCandidate(0)
	waiter := lockAsync(ctx, other, key, recordlock.Options{Timeout: time.Minute})
	waitQueued(t, l, key, 1)

	clk.Advance(800 * time.Millisecond) // the holder stalls most of its lease
	require.NoError(t, h.Renew(time.Second))
	assert.True(t, h.ExpiresAt().Equal(clk.Now().Add(time.Second)))
	clk.Advance(800 * time.Millisecond) // past the first deadline, inside the renewed one
	assert.False(t, h.IsExpired(), "the renewed lease is live")
	assert.False(t, h.Hold(), "Renew does not make the lock outlive its Txn")
	assert.Equal(t, acquired, h.AcquiredAt())
	assert.Equal(t, version, h.HolderVersionCandidate(0), "Renew issues no version")
	select {
	case r := <-waiter:
		t.Fatalf("the waiter got the key of a renewed lock: %+v", r)
	default:
	}

	require.NoError(t, txn.Put(key, []byte("v")))
	require.NoError(t, txn.Commit())
	assert.Equal(t, []byte("v"), dbGet(t, db, "k"))
	assert.True(t, h.IsExpired(), "the renewed lock ended with Commit")
	assert.False(t, h.IsLeaseExpired(), "released, not lapsed")
	assert.True(t, granted(t, waiter, "the waiter's grant").Release())
}

// Renew on a dead handle fails and changes nothing; an invalid lease is an *OptionError.
func TestRenewErrors(t *testing.T) {
	clk, l := manual(t, openDB(t))
	lock := func(key string) *recordlock.Handle {
		h, err := l.TryLock([]byte(key), recordlock.Options{Lease: time.Second})
		require.NoError(t, err)
		return h
	}

	released := lock("released")
	require.True(t, released.Release())
	require.ErrorIs(t, released.Renew(time.Minute), recordlock.ErrReleased)

	revoked := lock("revoked")
	revoked.RevokeLease()
	require.ErrorIs(t, revoked.Renew(time.Minute), recordlock.ErrLeaseExpired)

	live := lock("live")
	expires := live.ExpiresAt()
	for _, bad := range []time.Duration{time.Millisecond, -time.Second, time.Hour} {
		err := live.Renew(bad)
		require.ErrorIs(t, err, recordlock.ErrInvalidOptions, "Renew validates its lease as Options.Lease: lease %v", bad)
		var oe *recordlock.OptionError
		require.ErrorAs(t, err, &oe)
		assert.Equal(t, "Lease", oe.Field)
	}
	assert.True(t, expires.Equal(live.ExpiresAt()), "a failed Renew changes nothing")

	lapsed := lock("lapsed")
	clk.Advance(time.Second)
	require.ErrorIs(t, lapsed.Renew(time.Minute), recordlock.ErrLeaseExpired)
	assert.True(t, lapsed.IsLeaseExpired(), "Renew does not revive a lapsed lease")
	assert.True(t, live.IsLeaseExpired(), "nor did the failed Renews extend the live one")
}

// Under a cluster round Renew is clamped to the round's deadline: a granted round is never
// extended locally. Within the round it still extends a shorter deadline.
func TestRenewClampedToRound(t *testing.T) {
	clk, l := manual(t, openDB(t))
	h, err := l.TryLock([]byte("k"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	tsR := recordlock.Timestamp(clk.Now().Add(10 * time.Second).UnixNano())
	require.True(t, h.JoinClusterRound(tsR, 2*time.Second, clk.Mono(), nil))

	require.NoError(t, h.Renew(time.Minute))
	assert.True(t, h.ExpiresAt().Equal(tsR.Time().Add(2*time.Second)), "the round's end is still wall(tsR)+lease")
	assert.False(t, h.Hold())
	clk.Advance(2*time.Second - time.Nanosecond)
	assert.False(t, h.IsExpired())
	clk.Advance(time.Nanosecond)
	assert.True(t, h.IsLeaseExpired(), "a granted round is never extended locally")

	h2, err := l.TryLock([]byte("j"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, h2.JoinClusterRound(recordlock.Timestamp(clk.Now().UnixNano()), 10*time.Second, clk.Mono(), nil))
	require.NoError(t, h2.Renew(time.Second))
	require.NoError(t, h2.Renew(2*time.Second), "a renewal inside the round moves the deadline")
	clk.Advance(2*time.Second - time.Nanosecond)
	assert.False(t, h2.IsExpired())
	clk.Advance(time.Nanosecond)
	assert.True(t, h2.IsLeaseExpired())
}

// A round's release hook fires at the deadline without anyone looking: joining a round arms it.
func TestJoinedRoundArmsItsDeadline(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	h, err := l.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err)
	var hook hookCounter
	joinHook(t, h, clk, time.Second, hook.hook)
	clk.Advance(time.Second)
	assert.Equal(t, 1, hook.count(), "the hook fired at the round's deadline")
	assert.True(t, recordlock.ProbeTableEmpty(l))
}
