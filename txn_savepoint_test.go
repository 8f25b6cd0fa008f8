package recordlock_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// RollbackToSavePoint discards exactly the writes staged since the most recent mark, Get sees the
// writes before it again, and Commit writes only what is left.
func TestSavePointDiscardsLaterWrites(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	dbPut(t, db, "c", "committed")
	txn := l.Begin()
	defer txn.Rollback()
	_, err := txn.LockAll(ctx, recordlock.Options{}, []byte("a"), []byte("b"), []byte("c"))
	require.NoError(t, err)

	require.NoError(t, txn.Put([]byte("a"), []byte("a1")))
	txn.SetSavePoint()
	require.NoError(t, txn.Put([]byte("a"), []byte("a2")))
	require.NoError(t, txn.Put([]byte("b"), []byte("b1")))
	require.NoError(t, txn.Delete([]byte("c")))
	v, err := txn.Get([]byte("c"))
	require.NoError(t, err)
	require.Nil(t, v, "the staged Delete is visible before the rollback")

	require.NoError(t, txn.RollbackToSavePoint())
	for key, want := range map[string]string{"a": "a1", "c": "committed"} {
		v, err := txn.Get([]byte(key))
		require.NoError(t, err)
		assert.Equal(t, want, string(v), "Get %s", key)
	}
	v, err = txn.Get([]byte("b"))
	require.NoError(t, err)
	assert.Nil(t, v, "b's write was discarded")

	require.NoError(t, txn.Commit())
	assert.Equal(t, "a1", string(dbGet(t, db, "a")))
	assert.Nil(t, dbGet(t, db, "b"))
	assert.Equal(t, "committed", string(dbGet(t, db, "c")))
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Marks nest: each RollbackToSavePoint returns to the most recent mark and removes it, and once
// every mark is gone the next one is ErrNoSavePoint and changes nothing.
func TestSavePointsNest(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	key := []byte("k")
	txn := l.Begin()
	defer txn.Rollback()
	_, err := txn.Lock(context.Background(), key, recordlock.Options{})
	require.NoError(t, err)
	get := func() string {
		t.Helper()
		v, err := txn.Get(key)
		require.NoError(t, err)
		return string(v)
	}

	require.NoError(t, txn.Put(key, []byte("v0")))
	txn.SetSavePoint()
	require.NoError(t, txn.Put(key, []byte("v1")))
	txn.SetSavePoint()
	require.NoError(t, txn.Put(key, []byte("v2")))
	txn.SetSavePoint() // a mark with nothing staged after it
	require.Equal(t, "v2", get())

	require.NoError(t, txn.RollbackToSavePoint())
	assert.Equal(t, "v2", get(), "nothing was staged after the innermost mark")
	require.NoError(t, txn.RollbackToSavePoint())
	assert.Equal(t, "v1", get())
	require.NoError(t, txn.Put(key, []byte("v3")))
	require.NoError(t, txn.RollbackToSavePoint())
	assert.Equal(t, "v0", get())
	require.ErrorIs(t, txn.RollbackToSavePoint(), recordlock.ErrNoSavePoint)
	assert.Equal(t, "v0", get(), "ErrNoSavePoint changes nothing")

	require.NoError(t, txn.Commit())
	assert.Equal(t, "v0", string(dbGet(t, db, "k")))
}

// A Txn with no mark gets ErrNoSavePoint and keeps every staged write; after Commit or Rollback
// the calls report ErrTxnDone, and after the Locker's Close ErrClosed.
func TestSavePointErrors(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	key := []byte("k")

	txn := l.Begin()
	_, err := txn.Lock(context.Background(), key, recordlock.Options{})
	require.NoError(t, err)
	require.NoError(t, txn.Put(key, []byte("v")))
	require.ErrorIs(t, txn.RollbackToSavePoint(), recordlock.ErrNoSavePoint)
	v, err := txn.Get(key)
	require.NoError(t, err)
	assert.Equal(t, "v", string(v))
	txn.SetSavePoint()
	require.NoError(t, txn.Commit())
	assert.Equal(t, "v", string(dbGet(t, db, "k")))
	require.ErrorIs(t, txn.RollbackToSavePoint(), recordlock.ErrTxnDone)
	txn.SetSavePoint() // does nothing on an ended Txn
	require.ErrorIs(t, txn.RollbackToSavePoint(), recordlock.ErrTxnDone)

	rolled := l.Begin()
	rolled.SetSavePoint()
	rolled.Rollback()
	require.ErrorIs(t, rolled.RollbackToSavePoint(), recordlock.ErrTxnDone)

	open := l.Begin()
	defer open.Rollback()
	open.SetSavePoint()
	require.NoError(t, l.Close())
	require.ErrorIs(t, open.RollbackToSavePoint(), recordlock.ErrClosed)
}

// The Txn's locks are kept by a rollback to a savepoint, those taken after the mark too, and they
// still protect and fence the writes that are left.
func TestSavePointKeepsLocks(t *testing.T) {
	db, _, l, other := lockerPair(t)
	ctx := context.Background()
	txn := l.Begin()
	defer txn.Rollback()
	ha, err := txn.Lock(ctx, []byte("a"), recordlock.Options{})
	require.NoError(t, err)
	txn.SetSavePoint()
	hb, err := txn.Lock(ctx, []byte("b"), recordlock.Options{})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("b"), []byte("b1")))
	require.NoError(t, txn.RollbackToSavePoint())

	for _, h := range []*recordlock.Handle{ha, hb} {
		assert.False(t, h.IsExpired(), "%s is still locked", h.Key())
		_, err := other.TryLock(h.Key(), recordlock.Options{})
		require.ErrorIs(t, err, recordlock.ErrLocked, "%s is still locked", h.Key())
	}
	require.NoError(t, txn.Put([]byte("b"), []byte("b2")), "a lock taken after the mark still authorizes writes")
	require.NoError(t, txn.Commit())
	assert.Equal(t, "b2", string(dbGet(t, db, "b")))
	assert.True(t, ha.IsExpired() && hb.IsExpired(), "Commit ended both locks")
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A lock whose only protected write was rolled back protects nothing any more: once it is
// released, Commit does not fail for its lease, which it would if the write were still staged.
func TestSavePointUndoesProtection(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	ctx := context.Background()
	txn := l.Begin()
	defer txn.Rollback()
	ha, err := txn.Lock(ctx, []byte("a"), recordlock.Options{Lease: recordlock.MinLease})
	require.NoError(t, err)
	_, err = txn.Lock(ctx, []byte("b"), recordlock.Options{Lease: recordlock.MaxLease})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("b"), []byte("b1")))
	txn.SetSavePoint()
	require.NoError(t, txn.Put([]byte("a"), []byte("a1")))
	require.NoError(t, txn.RollbackToSavePoint())
	require.True(t, ha.Release(), "the Txn gives a's lock up: it no longer reads or writes a")
	clk.Advance(recordlock.MinLease) // a's lease is over: a write still protected by it would fail Commit
	require.NoError(t, txn.Commit())
	assert.Equal(t, "b1", string(dbGet(t, db, "b")))
	assert.Nil(t, dbGet(t, db, "a"))
}

// A write staged before the mark keeps its protection through a rollback, even when the same lock
// protected writes after the mark too: its lapse still fails Commit.
func TestSavePointKeepsEarlierProtection(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	txn := l.Begin()
	defer txn.Rollback()
	ha, err := txn.Lock(context.Background(), []byte("a"), recordlock.Options{Lease: recordlock.MinLease})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("a"), []byte("a1")))
	txn.SetSavePoint()
	require.NoError(t, txn.Put([]byte("a"), []byte("a2")))
	require.NoError(t, txn.RollbackToSavePoint())
	require.True(t, ha.Release())
	clk.Advance(recordlock.MinLease)
	require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired, "a1 is still protected by a's lapsed lease")
	assert.Nil(t, dbGet(t, db, "a"))
}

// A rollback past many writes of many keys (beyond the Txn's small inline lists) leaves Get and
// Commit consistent with the writes before the mark.
func TestSavePointWithManyWrites(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	txn, err := l.BeginTx(recordlock.TxnOptions{AllowUnlockedWrites: true})
	require.NoError(t, err)
	defer txn.Rollback()
	key := func(i int) []byte { return []byte(fmt.Sprintf("key-%02d", i)) }
	for i := range 12 {
		require.NoError(t, txn.Put(key(i), []byte("before")))
	}
	txn.SetSavePoint()
	for i := range 24 {
		require.NoError(t, txn.Put(key(i), []byte("after")))
	}
	require.NoError(t, txn.RollbackToSavePoint())
	for i := range 24 {
		v, err := txn.Get(key(i))
		require.NoError(t, err)
		if i < 12 {
			assert.Equal(t, "before", string(v), "key %d", i)
		} else {
			assert.Nil(t, v, "key %d", i)
		}
	}
	require.NoError(t, txn.Put(key(30), []byte("later")), "staging after the rollback works")
	require.NoError(t, txn.Commit())
	assert.Equal(t, "before", string(dbGet(t, db, "key-11")))
	assert.Nil(t, dbGet(t, db, "key-12"))
	assert.Equal(t, "later", string(dbGet(t, db, "key-30")))
}
