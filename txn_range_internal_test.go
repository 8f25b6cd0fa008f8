package recordlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/tempdb"
)

// Commit fences a range the Txn holds, with or without a write under it: once Commit has checked
// it, a key inside it cannot pass to another holder until the write returns, even if the range's
// lease lapses meanwhile (docs/DESIGN.md §16.1).
func TestTxnCommitFencesRanges(t *testing.T) {
	for _, staged := range []bool{true, false} {
		t.Run(map[bool]string{true: "with a write", false: "read-only"}[staged], func(t *testing.T) {
			db := tempdb.New(t)
			clk := NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			var inFence func()
			l := newHookedLocker(t, db, clk, &inFence)
			other := newTestLocker(t, db, clk)
			ctx := context.Background()

			txn := l.Begin()
			defer txn.Rollback()
			r, err := txn.LockRange(ctx, Range{Start: []byte("a"), End: []byte("c")}, Options{Scope: ScopeNode, Lease: time.Second})
			require.NoError(t, err)
			if staged {
				require.NoError(t, txn.Put([]byte("b"), []byte("v")))
			}
			var inside bool
			inFence = func() {
				inside = true
				clk.Advance(time.Second) // the range lapses after the check
				assert.True(t, r.IsLeaseExpired())
				_, err := other.TryLock([]byte("b"), Options{})
				assert.ErrorIs(t, err, ErrLocked, "a key of the range must not pass on mid-commit")
			}
			require.NoError(t, txn.Commit(), "a commit that entered its fences in time succeeds")
			require.True(t, inside)
			h, err := other.TryLock([]byte("b"), Options{})
			require.NoError(t, err, "the range's keys pass on once the commit returns")
			assert.True(t, h.Release())
			if staged {
				assert.Equal(t, []byte("v"), DBGet(t, db, "b"))
			}
			assert.True(t, l.tab.Empty(), "nothing is left locked or queued")
		})
	}
}

// A Txn that never locked a range has no txnRare for it: the lookups of its Lock, Get and writes
// stop at a nil check.
func TestTxnWithoutRangesHasNone(t *testing.T) {
	l := newTestLocker(t, tempdb.New(t), NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
	txn := l.Begin()
	defer txn.Rollback()
	_, err := txn.Lock(context.Background(), []byte("k"), Options{})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("k"), []byte("v")))
	_, err = txn.Get([]byte("k"))
	require.NoError(t, err)
	assert.Nil(t, txn.rare)
	assert.Nil(t, txn.ranges())
}

// A range locked again after its lease lapsed gets a new handle, which becomes the range's
// current one: the lapsed handle no longer fails Get, Scan or Commit, as a key locked again after
// a lapse does not.
func TestTxnRangeRelockedAfterLapse(t *testing.T) {
	db := tempdb.New(t)
	clk := NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	l := newTestLocker(t, db, clk)
	ctx := context.Background()
	txn := l.Begin()
	defer txn.Rollback()
	r := Range{Start: []byte("a"), End: []byte("c")}
	lapsed, err := txn.LockRange(ctx, r, Options{Lease: MinLease})
	require.NoError(t, err)
	clk.Advance(MinLease)
	require.True(t, lapsed.IsLeaseExpired())
	_, err = txn.Get([]byte("b"))
	require.ErrorIs(t, err, ErrLeaseExpired, "while the lapsed handle is the range's current one")

	h, err := txn.LockRange(ctx, r, Options{})
	require.NoError(t, err)
	require.NotSame(t, lapsed, h, "a lapsed range is locked anew")
	assert.False(t, txn.ranges().current(0), "the lapsed handle")
	assert.True(t, txn.ranges().current(1), "the new handle")
	_, err = txn.Get([]byte("b"))
	require.NoError(t, err)
	require.NoError(t, txn.Scan(r, func(_, _ []byte) error { return nil }))
	require.NoError(t, txn.Put([]byte("b"), []byte("v")))
	require.NoError(t, txn.Commit())
	assert.Equal(t, []byte("v"), DBGet(t, db, "b"))
	assert.True(t, l.tab.Empty(), "nothing is left locked or queued")
}
