package recordlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// Ports of RocksDB's range-locking tests (utilities/transactions/lock/range/range_locking_test.cc)
// to recordlock's Txn. RocksDB's GetRangeLock(cf, Endpoint(a), Endpoint(b)) locks the keys from a
// to b, both included, exclusively; here that is the Range {a, b+"\x00"}, since a Range's End is
// excluded and b+"\x00" is the least key after b. RocksDB's lock waits fail with TimedOut after
// the TransactionDB's lock timeout; here the waiting call's Timeout runs out on a ManualClock.

// portTimeout is the Timeout of the lock requests that must time out; the holders' leases are
// far longer.
const portTimeout = time.Second

// portHold is the options of the locks that must outlast every timeout of a port.
var portHold = recordlock.Options{Lease: recordlock.MaxLease}

// through returns the Range of the keys from a to b, both included: RocksDB's range
// [Endpoint(a), Endpoint(b)].
func through(a, b string) recordlock.Range {
	return recordlock.Range{Start: []byte(a), End: append([]byte(b), 0)}
}

// TestRocksDBBasicRangeLocking ports BasicRangeLocking: a range lock keeps out an overlapping
// range and a key inside it, and a key lock keeps out a range across it. The last step is not in
// the original: once txn0 commits, txn1 gets what it could not.
func TestRocksDBBasicRangeLocking(t *testing.T) {
	clk, l := manual(t, openDB(t))
	ctx := context.Background()
	txn0 := txnNamed(t, l, "txn0")
	txn1 := txnNamed(t, l, "txn1")

	// Get a range lock.
	_, err := txn0.LockRange(ctx, through("a", "c"), portHold)
	require.NoError(t, err)

	// The range lock inhibits an overlapping range lock.
	portTimesOut(t, clk, l, "txn1", "a range over [b, z] across txn0's [a, c]", func() error {
		_, err := txn1.LockRange(ctx, through("b", "z"), recordlock.Options{Timeout: portTimeout})
		return err
	})

	// The range lock inhibits an overlapping key lock (RocksDB's GetForUpdate of b).
	portTimesOut(t, clk, l, "txn1", "key b inside txn0's [a, c]", func() error {
		_, err := txn1.Lock(ctx, []byte("b"), recordlock.Options{Timeout: portTimeout})
		return err
	})

	// A key lock (RocksDB's Put of n takes one) inhibits a range lock across it.
	_, err = txn0.Lock(ctx, []byte("n"), portHold)
	require.NoError(t, err)
	require.NoError(t, txn0.Put([]byte("n"), []byte("value")))
	portTimesOut(t, clk, l, "txn1", "a range over [m, p] across txn0's key n", func() error {
		_, err := txn1.LockRange(ctx, through("m", "p"), recordlock.Options{Timeout: portTimeout})
		return err
	})

	require.NoError(t, txn0.Commit())

	// Not in the original: with txn0 gone, txn1 locks all three at once.
	_, err = txn1.LockRange(ctx, through("b", "z"), recordlock.Options{Timeout: portTimeout})
	require.NoError(t, err, "the range over [b, z] once txn0 committed")
	h, err := txn1.Lock(ctx, []byte("b"), recordlock.Options{Timeout: portTimeout})
	require.NoError(t, err, "key b once txn0 committed")
	_, isRange := h.Range()
	assert.True(t, isRange, "txn1's lock of b, inside its exclusive [b, z], is the range's handle")
	txn1.Rollback()
	assert.True(t, recordlock.ProbeTableEmpty(l), "the table holds nothing once both Txns ended")
}

// TestRocksDBMultipleTrxLockStatusData ports MultipleTrxLockStatusData: two Txns' range locks as
// the lock status shows them, each with its owner, its bounds and its mode. RocksDB's
// GetRangeLockStatusData is Locker.Locks here, and a Txn's id its Name.
func TestRocksDBMultipleTrxLockStatusData(t *testing.T) {
	_, l := manual(t, openDB(t))
	ctx := context.Background()
	txn0 := txnNamed(t, l, "txn0")
	txn1 := txnNamed(t, l, "txn1")

	_, err := txn0.LockRange(ctx, through("z", "z"), recordlock.Options{})
	require.NoError(t, err)
	_, err = txn1.LockRange(ctx, through("b", "e"), recordlock.Options{})
	require.NoError(t, err)

	want := map[string]recordlock.Range{"txn0": through("z", "z"), "txn1": through("b", "e")}
	var seen []string
	for info := range l.Locks() {
		seen = append(seen, info.Owner)
		r, ok := want[info.Owner]
		if !assert.True(t, ok, "a lock of an unknown owner %q", info.Owner) {
			continue
		}
		assert.Equal(t, uint32(0), info.ColumnFamilyID, "%s: the default column family", info.Owner)
		assert.True(t, info.IsRange, "%s: a range", info.Owner)
		assert.False(t, info.Shared, "%s: exclusive", info.Owner)
		assert.Equal(t, r.Start, info.Key, "%s: the range's start", info.Owner)
		assert.Equal(t, r.End, info.RangeEnd, "%s: the range's end", info.Owner)
	}
	assert.ElementsMatch(t, []string{"txn0", "txn1"}, seen, "one lock each")
	assert.Equal(t, 2, l.Stats().Held, "Stats.Held counts each range once")
}

// portTimesOut runs lock, a request of the Txn named owner that must wait, until it is queued in l's
// table, then moves clk past portTimeout and requires that it failed with ErrTimeout.
func portTimesOut(t *testing.T, clk *recordlock.ManualClock, l *recordlock.Locker, owner, what string, lock func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- lock() }()
	// A request that returns at once, as it must not, ends the wait as well, and fails below.
	testutil.WaitUntil(t, what+" queues", func() bool { return waitsOf(l, owner) == 1 || len(done) > 0 })
	clk.Advance(portTimeout)
	require.ErrorIs(t, testutil.Await(t, done, what+" timing out"), recordlock.ErrTimeout, what)
}
