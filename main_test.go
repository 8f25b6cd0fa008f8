package recordlock_test

import (
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/recordlock/recordlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// epoch is the wall reading every ManualClock in these tests starts at.
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// openDB opens a fresh RocksDB in a temp dir, closed at the end of the test.
func openDB(t testing.TB) *grocksdb.DB {
	t.Helper()
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	db, err := grocksdb.OpenDb(opts, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

// newLocker returns a Locker on db, closed at the end of the test.
func newLocker(t testing.TB, db *grocksdb.DB, opts ...recordlock.Option) *recordlock.Locker {
	t.Helper()
	l, err := recordlock.New(db, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// manual returns a ManualClock and a Locker on db that runs on it.
func manual(t testing.TB, db *grocksdb.DB, opts ...recordlock.Option) (*recordlock.ManualClock, *recordlock.Locker) {
	t.Helper()
	clk := recordlock.NewManualClock(epoch)
	return clk, newLocker(t, db, append([]recordlock.Option{recordlock.WithClock(clk)}, opts...)...)
}
