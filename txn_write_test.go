package recordlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// Plain writes to unlocked keys are never blocked by locks.
func TestTxnPlainWritesNotBlockedByLocks(t *testing.T) {
	db, _, l, other := lockerPair(t)
	ctx := context.Background()

	held, err := other.Lock(ctx, []byte("a"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)

	txn := beginUnlocked(t, l)
	t.Cleanup(txn.Rollback) // after the Commit's goroutine has ended (testutil.Go)
	_, err = txn.Lock(ctx, []byte("mine"), recordlock.Options{})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("a"), []byte("plain")), "a key this Txn did not lock needs no live handle")
	require.NoError(t, txn.Put([]byte("b"), []byte("free")))
	require.NoError(t, txn.Put([]byte("mine"), []byte("fenced")))

	committed := make(chan error, 1)
	testutil.Go(t, ctx, func(context.Context) { committed <- txn.Commit() })
	require.NoError(t, testutil.Await(t, committed, "Commit"))

	assert.Equal(t, []byte("plain"), dbGet(t, db, "a"))
	assert.Equal(t, []byte("free"), dbGet(t, db, "b"))
	assert.Equal(t, []byte("fenced"), dbGet(t, db, "mine"))
	assert.False(t, held.IsExpired(), "another holder's lock is untouched by a plain write")
	_, err = l.TryLock([]byte("a"), recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked)
	assert.True(t, held.Release())
}

// Staging a write to a locked key needs a live handle; a write staged before Release commits
// while the lease lasts; after RevokeLease it is fenced.
func TestTxnStagingNeedsLiveHandle(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	ctx := context.Background()

	t.Run("released", func(t *testing.T) {
		txn := l.Begin()
		defer txn.Rollback()
		h, err := txn.Lock(ctx, []byte("r"), recordlock.Options{})
		require.NoError(t, err)
		require.True(t, h.Release())
		require.ErrorIs(t, txn.Put([]byte("r"), []byte("v")), recordlock.ErrReleased)
		require.ErrorIs(t, txn.Delete([]byte("r")), recordlock.ErrReleased)
		require.NoError(t, txn.Commit())
		assert.Nil(t, dbGet(t, db, "r"), "a rejected write is not staged")
	})
	t.Run("lapsed", func(t *testing.T) {
		txn := l.Begin()
		defer txn.Rollback()
		_, err := txn.Lock(ctx, []byte("x"), recordlock.Options{Lease: time.Second})
		require.NoError(t, err)
		clk.Advance(time.Second)
		require.ErrorIs(t, txn.Put([]byte("x"), []byte("v")), recordlock.ErrLeaseExpired)
		require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired, "the Txn still holds x, whose lease ended")
		assert.Nil(t, dbGet(t, db, "x"))
	})
	t.Run("released after staging commits", func(t *testing.T) {
		txn := l.Begin()
		defer txn.Rollback()
		h, err := txn.Lock(ctx, []byte("s"), recordlock.Options{Lease: time.Second})
		require.NoError(t, err)
		require.NoError(t, txn.Put([]byte("s"), []byte("v")))
		require.True(t, h.Release())
		clk.Advance(500 * time.Millisecond)
		require.NoError(t, txn.Commit())
		assert.Equal(t, []byte("v"), dbGet(t, db, "s"))
	})
	t.Run("revoked after release is fenced", func(t *testing.T) {
		txn := l.Begin()
		defer txn.Rollback()
		h, err := txn.Lock(ctx, []byte("v"), recordlock.Options{Lease: time.Second})
		require.NoError(t, err)
		require.NoError(t, txn.Put([]byte("v"), []byte("v")))
		require.True(t, h.Release())
		h.RevokeLease()
		require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired,
			"a write staged before Release is fenced once the lease is revoked")
		assert.Nil(t, dbGet(t, db, "v"))
	})
}

// Staged keys and values of every size stay intact and apart: small ones share room inside the
// Txn until it is full, larger ones get their own copy, and the caller's slices are reused at once.
func TestTxnStagedBytesKeptApart(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	txn := beginUnlocked(t, l)
	defer txn.Rollback()
	want := map[string]string{
		"s1":         "small",
		"big":        strings.Repeat("B", 100),
		"s2":         "tiny",
		"long-key/x": strings.Repeat("v", 20),
		"s3":         "after",
		"s4":         "",
	}
	order := []string{"s1", "big", "s2", "long-key/x", "s3", "s4"}
	buf := make([]byte, 0, 128)
	for i, k := range order {
		if i%2 == 0 {
			_, err := txn.Lock(ctx, []byte(k), recordlock.Options{})
			require.NoError(t, err)
		}
		kb := append([]byte(nil), k...)
		vb := append(buf[:0], want[k]...)
		require.NoError(t, txn.Put(kb, vb))
		clear(kb) // the caller may reuse its slices
		for j := range vb {
			vb[j] = '!'
		}
	}
	for _, k := range order {
		got, err := txn.Get([]byte(k))
		require.NoError(t, err)
		assert.Equal(t, want[k], string(got), "staged %q", k)
	}
	require.NoError(t, txn.Commit())
	for _, k := range order {
		assert.Equal(t, want[k], string(dbGet(t, db, k)), "committed %q", k)
	}
}

// A write to a record the Txn never locked fails with ErrNotLocked and stages nothing, in every
// column family; the same key locked in another column family does not count.
func TestTxnWriteToUnlockedKeyFails(t *testing.T) {
	db, cfs := openCFDB(t, "one")
	cf := cfs[0]
	_, l := manual(t, db)
	ctx := context.Background()

	for _, tc := range []struct {
		name  string
		write func(txn *recordlock.Txn) error
	}{
		{"Put", func(txn *recordlock.Txn) error { return txn.Put([]byte("x"), []byte("v")) }},
		{"Delete", func(txn *recordlock.Txn) error { return txn.Delete([]byte("x")) }},
		{"PutCF", func(txn *recordlock.Txn) error { return txn.PutCF(cf, []byte("x"), []byte("v")) }},
		{"DeleteCF", func(txn *recordlock.Txn) error { return txn.DeleteCF(cf, []byte("x")) }},
		{"PutCF of a key locked in the default family", func(txn *recordlock.Txn) error {
			return txn.PutCF(cf, []byte("mine"), []byte("v"))
		}},
		{"Put of a key locked in another family", func(txn *recordlock.Txn) error {
			return txn.Put([]byte("theirs"), []byte("v"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			txn := l.Begin()
			defer txn.Rollback()
			_, err := txn.Lock(ctx, []byte("mine"), recordlock.Options{})
			require.NoError(t, err)
			_, err = txn.LockCF(ctx, cf, []byte("theirs"), recordlock.Options{})
			require.NoError(t, err)
			require.ErrorIs(t, tc.write(txn), recordlock.ErrNotLocked)
			for _, k := range []string{"x", "mine", "theirs"} {
				got, err := txn.Get([]byte(k))
				require.NoError(t, err)
				assert.Nil(t, got, "nothing staged for %s", k)
				got, err = txn.GetCF(cf, []byte(k))
				require.NoError(t, err)
				assert.Nil(t, got, "nothing staged for %s in the other family", k)
			}
			require.NoError(t, txn.Commit())
			for _, k := range []string{"x", "mine", "theirs"} {
				assert.Nil(t, dbGet(t, db, k), "nothing written to %s", k)
				assert.Nil(t, cfGet(t, db, cf, k), "nothing written to %s in the other family", k)
			}
		})
	}
}

// AllowUnlockedWrites makes writes to unlocked records plain writes again, in any column family,
// even to a key another Locker holds; writes to locked records stay protected.
func TestTxnAllowUnlockedWrites(t *testing.T) {
	db, cfs := openCFDB(t, "one")
	cf := cfs[0]
	clk, l := manual(t, db)
	other := newLocker(t, db, recordlock.WithClock(clk))
	ctx := context.Background()
	dbPut(t, db, "gone", "old")
	held, err := other.Lock(ctx, []byte("busy"), recordlock.Options{})
	require.NoError(t, err)

	txn, err := l.BeginTx(recordlock.TxnOptions{AllowUnlockedWrites: true})
	require.NoError(t, err)
	defer txn.Rollback()
	h, err := txn.Lock(ctx, []byte("mine"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("busy"), []byte("plain")))
	require.NoError(t, txn.PutCF(cf, []byte("busy"), []byte("plain-cf")))
	require.NoError(t, txn.Delete([]byte("gone")))
	require.NoError(t, txn.Put([]byte("mine"), []byte("fenced")))
	require.True(t, h.Release())
	require.ErrorIs(t, txn.Put([]byte("mine"), []byte("again")), recordlock.ErrReleased,
		"a record the Txn locked stays protected by its lock")
	require.NoError(t, txn.Commit())

	assert.Equal(t, []byte("plain"), dbGet(t, db, "busy"))
	assert.Equal(t, []byte("plain-cf"), cfGet(t, db, cf, "busy"))
	assert.Nil(t, dbGet(t, db, "gone"))
	assert.Equal(t, []byte("fenced"), dbGet(t, db, "mine"))
	assert.False(t, held.IsExpired(), "a plain write leaves another holder's lock alone")
	assert.True(t, held.Release())
}
