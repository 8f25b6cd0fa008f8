package recordlock_test

import (
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// TestClockFaultsNeverExtendOrShareALease injects wall-clock steps of an hour either way, and a
// monotonic stall (the process paused for ten leases, then resumed at once), at every point of a
// lock's life: before it is acquired, while it is held, inside Fence's commit, between minting a
// cluster round and joining it, while upgrading it to a hold, and after its release. Whatever the
// clock did, the lease ends exactly at its monotonic deadline (never later, and a wall step never
// makes it earlier), no second Locker takes the key while the lease lasts or while a commit runs,
// the successor's AcquiredAt is after the holder's, and ExpiresAt moves only with the lease.
func TestClockFaultsNeverExtendOrShareALease(t *testing.T) {
	const lease = time.Second
	faults := []struct {
		name   string
		inject func(*recordlock.ManualClock)
	}{
		{"wall +1h", func(c *recordlock.ManualClock) { c.StepWall(time.Hour) }},
		{"wall -1h", func(c *recordlock.ManualClock) { c.StepWall(-time.Hour) }},
		{"monotonic stall", func(c *recordlock.ManualClock) { c.Advance(10 * lease) }},
	}
	phases := []string{"before acquire", "holding", "during Fence", "joining a round", "upgrading", "after release"}
	for _, phase := range phases {
		for _, fault := range faults {
			t.Run(phase+"/"+fault.name, func(t *testing.T) {
				clockFaultCase(t, phase, fault.inject, lease)
			})
		}
	}
}

func clockFaultCase(t *testing.T, phase string, inject func(*recordlock.ManualClock), lease time.Duration) {
	db := openDB(t)
	clk := recordlock.NewManualClock(epoch)
	holderL := newLocker(t, db, recordlock.WithClock(clk))
	rival := newLocker(t, db, recordlock.WithClock(clk))
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	key := []byte("clocked")
	opts := recordlock.Options{Scope: recordlock.ScopeNode, Lease: lease}

	// rivalLocked asserts that the rival Locker cannot take the key now.
	rivalLocked := func(when string) {
		t.Helper()
		h, err := rival.TryLock(key, opts)
		if !assert.ErrorIs(t, err, recordlock.ErrLocked, "a second holder took the key %s", when) {
			h.Release()
		}
	}

	if phase == "before acquire" {
		inject(clk)
	}
	w0, m0 := clk.Now(), clk.Mono()
	h, err := holderL.TryLock(key, opts)
	require.NoError(t, err)
	deadline, expires := m0+lease, w0.Add(lease)
	released, dead := false, false

	switch phase {
	case "holding":
		clk.Advance(lease / 2)
		inject(clk)
	case "during Fence":
		clk.Advance(lease / 2)
		ran := false
		err := h.Fence(func() error {
			ran = true
			inject(clk)
			// Whatever the clock did, the key cannot pass on while commit runs.
			rivalLocked("while a fenced commit ran")
			return db.Put(wo, key, []byte("fenced"))
		})
		require.NoError(t, err)
		require.True(t, ran)
	case "joining a round":
		clk.Advance(lease / 4)
		tsR, minted := holderL.Timestamp(), clk.Mono()
		inject(clk)
		joined := h.JoinClusterRound(tsR, lease, minted, nil)
		// The round runs from its mint instant, never from tsR's wall reading: a wall step does
		// not move it, and a stall past it leaves nothing to join.
		stalled := clk.Mono()-minted >= lease
		require.Equal(t, !stalled, joined)
		if joined {
			deadline, expires = minted+lease, tsR.Time().Add(lease)
		}
	case "upgrading":
		clk.Advance(lease / 2)
		inject(clk)
		err := h.UpgradeToHold(lease)
		if clk.Mono() >= deadline {
			require.ErrorIs(t, err, recordlock.ErrLeaseExpired, "a stalled lease cannot be upgraded back to life")
			dead = true
		} else {
			require.NoError(t, err)
			wall, now := clk.Now(), clk.Mono()
			deadline, expires = now+lease, wall.Add(lease)
		}
	case "after release":
		clk.Advance(lease / 4)
		require.True(t, h.Release())
		released = true
		inject(clk)
	}
	if !dead {
		assert.True(t, h.ExpiresAt().Equal(expires), "ExpiresAt %v, want %v", h.ExpiresAt(), expires)
	}

	if now := clk.Mono(); now < deadline {
		// One nanosecond before the deadline the lease still holds: no wall step shortened it.
		clk.Advance(deadline - now - 1)
		assert.False(t, h.IsLeaseExpired(), "the lease ended before its deadline")
		if released {
			assert.True(t, h.IsExpired(), "a released handle authorizes nothing")
		} else {
			assert.False(t, h.IsExpired())
			rivalLocked("before the deadline")
			ran := false
			require.NoError(t, h.Fence(func() error { ran = true; return nil }))
			assert.True(t, ran)
		}
		clk.Advance(1)
	}

	// At the deadline (or past it, after a stall) the lease is over for good.
	assert.True(t, h.IsLeaseExpired(), "the lease outlived its deadline")
	assert.True(t, h.IsExpired())
	select {
	case <-h.Done():
	default:
		t.Error("Done still open past the deadline")
	}
	ran := false
	require.ErrorIs(t, h.Fence(func() error { ran = true; return nil }), recordlock.ErrLeaseExpired)
	assert.False(t, ran, "a fenced commit ran past the deadline")
	assert.False(t, h.Release())

	// The key passes to exactly one new holder, stamped after the old one.
	h2, err := rival.TryLock(key, opts)
	require.NoError(t, err, "the key did not pass on at the deadline")
	assert.Greater(t, h2.AcquiredAt(), h.AcquiredAt(), "timestamps went backwards with the wall clock")
	_, err = holderL.TryLock(key, opts)
	require.ErrorIs(t, err, recordlock.ErrLocked)

	// Later wall steps do not revive the old handle.
	clk.StepWall(-2 * time.Hour)
	assert.True(t, h.IsLeaseExpired())
	clk.StepWall(4 * time.Hour)
	assert.True(t, h.IsLeaseExpired())
	assert.True(t, h2.Release())
	assert.True(t, recordlock.ProbeTableEmpty(rival))
}
