package rocksshared_test

import (
	"testing"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/recordlock/recordlock/internal/tempdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// shortWait is the lock timeout of every transaction here, in milliseconds: how long a lock
// request that conflicts waits before it fails.
const shortWait = 50

// db is a TransactionDB in tb's temporary directory, with the options every transaction begins
// with, all closed or destroyed when tb's run ends.
type db struct {
	tdb *grocksdb.TransactionDB
	ro  *grocksdb.ReadOptions
	wo  *grocksdb.WriteOptions
	to  *grocksdb.TransactionOptions
}

func openDB(tb testing.TB) *db {
	tb.Helper()
	opts := tempdb.Options()
	defer opts.Destroy()
	topts := grocksdb.NewDefaultTransactionDBOptions()
	defer topts.Destroy()
	tdb, err := grocksdb.OpenTransactionDb(opts, topts, tb.TempDir())
	require.NoError(tb, err)
	d := &db{tdb: tdb, ro: grocksdb.NewDefaultReadOptions(), wo: grocksdb.NewDefaultWriteOptions(),
		to: grocksdb.NewDefaultTransactionOptions()}
	d.to.SetLockTimeout(shortWait)
	tb.Cleanup(func() {
		d.ro.Destroy()
		d.wo.Destroy()
		d.to.Destroy()
		d.tdb.Close()
	})
	return d
}

// begin starts a transaction, destroyed (after a rollback if it is still open) when tb's run
// ends.
func (d *db) begin(tb testing.TB) *grocksdb.Transaction {
	tb.Helper()
	txn := d.tdb.TransactionBegin(d.wo, d.to, nil)
	tb.Cleanup(func() {
		_ = txn.Rollback()
		txn.Destroy()
	})
	return txn
}

func (d *db) put(tb testing.TB, key, value string) {
	tb.Helper()
	require.NoError(tb, d.tdb.Put(d.wo, []byte(key), []byte(value)))
}
