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
	assert.False(t, testutil.Closed(h.Done()))
	require.True(t, h.Release())

	h, err = l.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err)
	assert.False(t, h.Hold())
	assert.True(t, h.ExpiresAt().Equal(clk.Now().Add(recordlock.DefaultLease)))
	require.True(t, h.Release())
}

// With timers that never fire, IsExpired (and every other lazy check) completes the expiry itself.
func TestLazyExpiryWithoutTimers(t *testing.T) {
	clk := frozenTimers{recordlock.NewManualClock(epoch)}
	db := openDB(t)
	l := newLocker(t, db, recordlock.WithClock(clk))
	other := newLocker(t, db, recordlock.WithClock(clk))

	checks := map[string]func(h *recordlock.Handle){
		"IsExpired": func(h *recordlock.Handle) {
			assert.True(t, h.IsExpired(), "IsExpired compares against the monotonic deadline itself, not a timer")
		},
		"IsLeaseExpired": func(h *recordlock.Handle) {
			assert.True(t, h.IsLeaseExpired(), "IsLeaseExpired is true once Mono() >= deadline, whether or not a timer ran")
		},
		"Release": func(h *recordlock.Handle) { assert.False(t, h.Release()) },
		"Done":    func(h *recordlock.Handle) { assert.True(t, testutil.Closed(h.Done())) },
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
			assert.Equal(t, 1, hooks.count(), "the lazy check completes the expiry: it fired the release hook")
			assert.True(t, recordlock.ProbeTableEmpty(l), "the lazy check completes the expiry: it gave the key back")
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
	assert.True(t, testutil.Closed(done))
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
	h, err := l.TryLock(key, recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	var hooks hookCounter
	joinHook(t, h, clk, time.Minute, hooks.hook)
	got := lockAsync(context.Background(), l, key, wait)
	waitQueued(t, l, key, 1)

	h.RevokeLease()
	assert.Equal(t, 1, hooks.count())
	assert.True(t, h.IsLeaseExpired())
	assert.True(t, h.IsExpired())
	assert.True(t, testutil.Closed(h.Done()))
	r := testutil.Await(t, got, "Lock")
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
