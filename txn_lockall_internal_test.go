package recordlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/tempdb"
)

// handleState is what a Hold upgrade changes and a failed LockAll must put back.
type handleState struct {
	due       time.Duration
	expiresAt int64
	asked     time.Duration // the lease a round may not exceed
	hold      bool
	candidate Timestamp // the version counter
}

func stateOf(h *Handle) handleState {
	s := h.claim.Snapshot()
	return handleState{due: s.Deadline, expiresAt: s.ExpiresAt, asked: s.AskedLease, hold: s.Hold(),
		candidate: h.HolderVersionCandidate(0)}
}

// A LockAll with Hold whose upgrades have begun and which then fails undoes every upgrade it
// made exactly: deadline, ExpiresAt, the lease asked for, Hold and version counter, whether an upgrade itself fails or
// a key the call took lapsed while the upgrades ran.
func TestTxnLockAllUndoesHoldUpgrades(t *testing.T) {
	for _, tc := range []struct {
		name string
		// between runs after every key is found live and before the upgrades.
		between func(clk *ManualClock, a, b *Handle)
	}{
		{name: "an upgrade fails", between: func(_ *ManualClock, _, b *Handle) { b.RevokeLease() }},
		{name: "a key taken lapses during the upgrades", between: func(clk *ManualClock, _, _ *Handle) { clk.Advance(time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := tempdb.New(t)
			clk := NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			var between func()
			l, err := New(db, WithClock(clk), failpointsOption{failpoints{beforeHoldExtension: func() { between() }}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			other := newTestLocker(t, db, clk)
			ctx := context.Background()

			txn := l.Begin()
			defer txn.Rollback()
			a, err := txn.Lock(ctx, []byte("a"), Options{Lease: time.Minute})
			require.NoError(t, err)
			b, err := txn.Lock(ctx, []byte("b"), Options{Lease: 2 * time.Minute, Hold: true})
			require.NoError(t, err)
			b.NextHolderVersion()
			clk.Advance(10 * time.Millisecond)
			wantA, wantB := stateOf(a), stateOf(b)
			require.True(t, wantB.hold)
			require.Equal(t, b.AcquiredAt()+1, wantB.candidate, "b issued a version")
			require.False(t, wantA.hold)
			require.Equal(t, a.AcquiredAt(), wantA.candidate, "a issued none")

			ran := false
			between = func() {
				ran = true
				tc.between(clk, a, b)
			}
			// c is free and taken with a 1 s lease; the upgrades give a and b 1 s from now.
			hs, err := txn.LockAll(ctx, Options{Lease: time.Second, Hold: true}, []byte("c"), []byte("a"), []byte("b"))
			require.True(t, ran)
			require.ErrorIs(t, err, ErrLeaseExpired)
			assert.Nil(t, hs)
			assert.Equal(t, wantA, stateOf(a), "a is as it was")
			if !b.IsLeaseExpired() {
				assert.Equal(t, wantB, stateOf(b), "b is as it was")
			}
			assert.False(t, a.IsExpired())
			c, err := other.TryLock([]byte("c"), Options{})
			require.NoError(t, err, "the key this call took is released")
			assert.True(t, c.Release())
		})
	}
}
