package recordlock_test

import (
	"context"
	"testing"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// A column family handle of another database is refused by every call that takes one, before
// anything is locked or staged.
func TestColumnFamilyOfAnotherDatabaseRefused(t *testing.T) {
	db, here := openCFDB(t, "index", "orders") // index is ID 1, orders ID 2
	_, other := openCFDB(t, "orders")          // orders is ID 1
	_, third := openCFDB(t, "a", "b", "c")     // a is ID 1, c ID 3
	l := newLocker(t, db)
	ctx := context.Background()
	key := []byte("k")

	for name, cf := range map[string]*grocksdb.ColumnFamilyHandle{
		"an ID that is another family here":        third[0],
		"an ID that does not exist here":           third[2],
		"a name here whose family has a higher ID": other[0],
	} {
		t.Run(name, func(t *testing.T) {
			_, err := l.LockCF(ctx, cf, key, recordlock.Options{})
			require.ErrorIs(t, err, recordlock.ErrInvalidOptions)
			_, err = l.TryLockCF(cf, key, recordlock.Options{})
			require.ErrorIs(t, err, recordlock.ErrInvalidOptions)

			txn := l.Begin()
			defer txn.Rollback()
			_, err = txn.LockCF(ctx, cf, key, recordlock.Options{})
			require.ErrorIs(t, err, recordlock.ErrInvalidOptions)
			_, err = txn.LockAllCF(ctx, cf, recordlock.Options{}, key, []byte("k2"))
			require.ErrorIs(t, err, recordlock.ErrInvalidOptions)
			_, err = txn.GetCF(cf, key)
			require.ErrorIs(t, err, recordlock.ErrInvalidOptions)

			// Even where unlocked writes are allowed, nothing is staged.
			loose, err := l.BeginTx(recordlock.TxnOptions{AllowUnlockedWrites: true})
			require.NoError(t, err)
			require.ErrorIs(t, loose.PutCF(cf, key, []byte("v")), recordlock.ErrInvalidOptions)
			require.ErrorIs(t, loose.DeleteCF(cf, key), recordlock.ErrInvalidOptions)
			require.NoError(t, loose.Commit())

			assert.Empty(t, collectLocks(l), "nothing is locked")
			assert.Zero(t, l.Stats().Acquired)
			ro := grocksdb.NewDefaultReadOptions()
			defer ro.Destroy()
			v, err := db.GetBytes(ro, key)
			require.NoError(t, err)
			assert.Nil(t, v, "nothing was written to the default family")
			for _, f := range here {
				v, err := db.GetCF(ro, f, key)
				require.NoError(t, err)
				assert.False(t, v.Exists(), "nothing was written to %s", f.Name())
				v.Free()
			}
		})
	}
}

// This database's own handles pass, including one of a family created after the Locker first
// listed the families and one whose ID is past a gap a dropped family left.
func TestColumnFamilyOfThisDatabase(t *testing.T) {
	db, here := openCFDB(t, "index")
	l := newLocker(t, db)
	ctx := context.Background()
	key := []byte("k")

	write := func(t *testing.T, cf *grocksdb.ColumnFamilyHandle, value string) {
		t.Helper()
		id := uint32(0)
		if cf != nil {
			id = cf.ID()
		}
		txn := l.Begin()
		defer txn.Rollback()
		hs, err := txn.LockAllCF(ctx, cf, recordlock.Options{}, key)
		require.NoError(t, err)
		assert.Equal(t, id, hs[0].ColumnFamilyID())
		require.NoError(t, txn.PutCF(cf, key, []byte(value)))
		require.NoError(t, txn.Commit())

		h, err := l.TryLockCF(cf, key, recordlock.Options{})
		require.NoError(t, err)
		assert.Equal(t, id, h.ColumnFamilyID())
		require.True(t, h.Release())

		check := l.Begin()
		defer check.Rollback()
		_, err = check.LockCF(ctx, cf, key, recordlock.Options{})
		require.NoError(t, err)
		got, err := check.GetCF(cf, key)
		require.NoError(t, err)
		assert.Equal(t, []byte(value), got)
		require.NoError(t, check.DeleteCF(cf, key))
		require.NoError(t, check.Commit())
	}
	write(t, here[0], "1")
	write(t, nil, "2") // the default family

	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	dropped, err := db.CreateColumnFamily(opts, "dropped")
	require.NoError(t, err)
	require.NoError(t, db.DropColumnFamily(dropped))
	dropped.Destroy()
	late, err := db.CreateColumnFamily(opts, "late") // ID 3, at position 2
	require.NoError(t, err)
	defer late.Destroy()
	require.Equal(t, uint32(3), late.ID())
	write(t, late, "3")
	write(t, here[0], "4")
}

// Locks names each lock's column family, for every Locker of the database: a cluster lock's
// identity across nodes is the family's name and the key.
func TestLocksNameTheColumnFamily(t *testing.T) {
	db, cfs := openCFDB(t, "orders")
	l1, err := recordlock.New(db)
	require.NoError(t, err)
	defer l1.Close()
	l2, err := recordlock.New(db) // never sees the handle
	require.NoError(t, err)
	defer l2.Close()
	ctx := context.Background()
	h1, err := l1.LockCF(ctx, cfs[0], []byte("7"), recordlock.Options{})
	require.NoError(t, err)
	defer h1.Release()
	h2, err := l1.Lock(ctx, []byte("7"), recordlock.Options{})
	require.NoError(t, err)
	defer h2.Release()
	for _, l := range []*recordlock.Locker{l1, l2} {
		got := map[uint32]string{}
		for info := range l.Locks() {
			got[info.ColumnFamilyID] = info.ColumnFamily
		}
		assert.Equal(t, map[uint32]string{0: "default", cfs[0].ID(): "orders"}, got)
	}
}
