package recordlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// A lock held only for reading protects the Commit: a Txn that decided its write on a flag whose
// lease lapsed, and which another Txn changed meanwhile, writes nothing.
func TestTxnCommitChecksReadLocks(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	other := newLocker(t, db, recordlock.WithClock(clk))
	ctx := context.Background()
	dbPut(t, db, "flag", "on")

	txn := l.Begin()
	defer txn.Rollback()
	flag, err := txn.Lock(ctx, []byte("flag"), recordlock.Options{Lease: 100 * time.Millisecond})
	require.NoError(t, err)
	rec, err := txn.Lock(ctx, []byte("rec"), recordlock.Options{Lease: 10 * time.Second})
	require.NoError(t, err)
	held, err := txn.Lock(ctx, []byte("held"), recordlock.Options{Lease: 10 * time.Second, Hold: true})
	require.NoError(t, err)
	v, err := txn.Get([]byte("flag"))
	require.NoError(t, err)
	require.Equal(t, []byte("on"), v)
	require.NoError(t, txn.Put([]byte("rec"), []byte("decided on flag=on")))

	clk.Advance(300 * time.Millisecond)
	rival := other.Begin()
	_, err = rival.Lock(ctx, []byte("flag"), recordlock.Options{})
	require.NoError(t, err, "the lapsed flag passes to a rival")
	require.NoError(t, rival.Put([]byte("flag"), []byte("off")))
	require.NoError(t, rival.Commit())

	fenced := l.Stats().Fenced
	require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired)
	assert.Nil(t, dbGet(t, db, "rec"), "a write decided on a lapsed read does not land")
	assert.Equal(t, []byte("off"), dbGet(t, db, "flag"))
	assert.Equal(t, fenced+1, l.Stats().Fenced, "the refusal counts as fenced")
	assert.True(t, flag.IsLeaseExpired())
	assert.True(t, rec.IsExpired(), "a refused Commit releases the Txn's locks")
	assert.False(t, rec.IsLeaseExpired(), "released, not lapsed")
	assert.False(t, held.IsExpired(), "a held lock survives a refused Commit")
	assert.True(t, held.Release())
}

// Which locks Commit checks: the Txn's latest handle of each record unless a Release of it
// returned true, with or without a write staged under it, Hold or not.
func TestTxnCommitChecksLocksStillHeld(t *testing.T) {
	for _, tc := range []struct {
		name    string
		staged  bool // a write to "w" is staged
		end     func(t *testing.T, txn *recordlock.Txn, h *recordlock.Handle, clk *recordlock.ManualClock)
		wantErr error
	}{
		{name: "read lock live", end: func(*testing.T, *recordlock.Txn, *recordlock.Handle, *recordlock.ManualClock) {}},
		{name: "read lock lapsed", staged: true, wantErr: recordlock.ErrLeaseExpired,
			end: func(_ *testing.T, _ *recordlock.Txn, _ *recordlock.Handle, clk *recordlock.ManualClock) {
				clk.Advance(time.Second)
			}},
		{name: "read lock revoked", staged: true, wantErr: recordlock.ErrLeaseExpired,
			end: func(_ *testing.T, _ *recordlock.Txn, h *recordlock.Handle, _ *recordlock.ManualClock) {
				h.RevokeLease()
			}},
		{name: "read-only Txn, read lock lapsed", wantErr: recordlock.ErrLeaseExpired,
			end: func(_ *testing.T, _ *recordlock.Txn, _ *recordlock.Handle, clk *recordlock.ManualClock) {
				clk.Advance(time.Second)
			}},
		{name: "released, then lapsed: not checked", staged: true,
			end: func(t *testing.T, _ *recordlock.Txn, h *recordlock.Handle, clk *recordlock.ManualClock) {
				require.True(t, h.Release())
				clk.Advance(time.Second)
			}},
		{name: "Release false after the lapse: still checked", staged: true, wantErr: recordlock.ErrLeaseExpired,
			end: func(t *testing.T, _ *recordlock.Txn, h *recordlock.Handle, clk *recordlock.ManualClock) {
				clk.Advance(time.Second)
				require.False(t, h.Release())
			}},
		{name: "re-locked after the lapse: checked through the new handle", staged: true,
			end: func(t *testing.T, txn *recordlock.Txn, h *recordlock.Handle, clk *recordlock.ManualClock) {
				clk.Advance(time.Second)
				h2, err := txn.Lock(context.Background(), []byte("r"), recordlock.Options{Lease: time.Second})
				require.NoError(t, err)
				require.NotSame(t, h, h2)
			}},
		{name: "new handle lapsed too", staged: true, wantErr: recordlock.ErrLeaseExpired,
			end: func(t *testing.T, txn *recordlock.Txn, _ *recordlock.Handle, clk *recordlock.ManualClock) {
				clk.Advance(time.Second)
				_, err := txn.Lock(context.Background(), []byte("r"), recordlock.Options{Lease: time.Second})
				require.NoError(t, err)
				clk.Advance(time.Second)
			}},
		{name: "hold lock lapsed", staged: true, wantErr: recordlock.ErrLeaseExpired,
			end: func(t *testing.T, txn *recordlock.Txn, h *recordlock.Handle, clk *recordlock.ManualClock) {
				_, err := txn.Lock(context.Background(), []byte("r"), recordlock.Options{Lease: time.Second, Hold: true})
				require.NoError(t, err)
				require.True(t, h.Hold())
				clk.Advance(time.Second)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openDB(t)
			clk, l := manual(t, db)
			ctx := context.Background()
			txn := l.Begin()
			defer txn.Rollback()
			r, err := txn.Lock(ctx, []byte("r"), recordlock.Options{Lease: time.Second})
			require.NoError(t, err)
			_, err = txn.Get([]byte("r"))
			require.NoError(t, err)
			w, err := txn.Lock(ctx, []byte("w"), recordlock.Options{Lease: time.Minute})
			require.NoError(t, err)
			if tc.staged {
				require.NoError(t, txn.Put([]byte("w"), []byte("v")))
			}
			tc.end(t, txn, r, clk)
			fenced := l.Stats().Fenced
			err = txn.Commit()
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				assert.Nil(t, dbGet(t, db, "w"), "nothing is written")
				assert.Equal(t, fenced+1, l.Stats().Fenced)
			} else {
				require.NoError(t, err)
				if tc.staged {
					assert.Equal(t, []byte("v"), dbGet(t, db, "w"))
				}
				assert.Equal(t, fenced, l.Stats().Fenced)
			}
			assert.True(t, w.IsExpired(), "Commit released the lock without Hold")
			assert.False(t, w.IsLeaseExpired(), "released, not lapsed")
			assert.True(t, recordlock.ProbeTableEmpty(l), "nothing is left locked or scheduled")
		})
	}
}
