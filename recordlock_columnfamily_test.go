package recordlock_test

import (
	"context"
	"testing"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// openDBWithColumnFamilies opens a fresh RocksDB with the default column family and the given
// ones, in that order (so with IDs 1, 2, ...), closed at the end of the test.
func openDBWithColumnFamilies(t testing.TB, names ...string) (*grocksdb.DB, map[string]*grocksdb.ColumnFamilyHandle) {
	t.Helper()
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	opts.SetCreateIfMissingColumnFamilies(true)
	names = append([]string{"default"}, names...)
	cfOpts := make([]*grocksdb.Options, len(names))
	for i := range cfOpts {
		cfOpts[i] = opts
	}
	db, cfs, err := grocksdb.OpenDbColumnFamilies(opts, t.TempDir(), names, cfOpts)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, cf := range cfs {
			cf.Destroy()
		}
		db.Close()
	})
	byName := map[string]*grocksdb.ColumnFamilyHandle{}
	for i, cf := range cfs {
		require.Equal(t, uint32(i), cf.ID())
		byName[names[i]] = cf
	}
	return db, byName
}

// A column family handle of another database is refused by every call that takes one, before
// anything is locked or staged.
func TestColumnFamilyOfAnotherDatabaseRefused(t *testing.T) {
	db, here := openDBWithColumnFamilies(t, "index", "orders") // index is ID 1, orders ID 2
	_, other := openDBWithColumnFamilies(t, "orders")          // orders is ID 1
	_, third := openDBWithColumnFamilies(t, "a", "b", "c")     // c is ID 3
	l := newLocker(t, db)
	ctx := context.Background()
	key := []byte("k")

	for name, cf := range map[string]*grocksdb.ColumnFamilyHandle{
		"an ID that is another family here":        third["a"],
		"an ID that does not exist here":           third["c"],
		"a name here whose family has a higher ID": other["orders"],
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
	db, here := openDBWithColumnFamilies(t, "index")
	l := newLocker(t, db)
	ctx := context.Background()
	key := []byte("k")

	write := func(t *testing.T, cf *grocksdb.ColumnFamilyHandle, value string) {
		t.Helper()
		txn := l.Begin()
		defer txn.Rollback()
		hs, err := txn.LockAllCF(ctx, cf, recordlock.Options{}, key)
		require.NoError(t, err)
		assert.Equal(t, cf.ID(), hs[0].ColumnFamilyID())
		require.NoError(t, txn.PutCF(cf, key, []byte(value)))
		require.NoError(t, txn.Commit())

		h, err := l.TryLockCF(cf, key, recordlock.Options{})
		require.NoError(t, err)
		assert.Equal(t, cf.ID(), h.ColumnFamilyID())
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
	write(t, here["index"], "1")
	write(t, here["default"], "2")

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
	write(t, here["index"], "4")
}
