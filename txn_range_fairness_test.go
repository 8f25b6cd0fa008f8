package recordlock_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// Fairness beside ranges (docs/DESIGN.md §17.2): a request of a Txn never waits behind a queued
// request that waits for a lock the Txn holds, and keys inside a range of the Txn are served by it.

// The freeze: the Txn holds an exclusive range over k0 and another's shared request for k0 waits
// for it. The Txn's shared LockAll of k0 returns the range's handle at once, touching nothing;
// queued behind that request it would wait out its whole Timeout, with no deadlock to break it.
func TestTxnLockAllInsideOwnRange(t *testing.T) {
	_, _, l, other := lockerPair(t)
	ctx := context.Background()
	txn := l.Begin()
	defer txn.Rollback()
	r, err := txn.LockRange(ctx, rng("k0", "k1"), node)
	require.NoError(t, err)
	queued := lockAsync(ctx, other, []byte("k0"), recordlock.Options{Shared: true, Timeout: time.Minute})
	waitingCount(t, l, 1)
	acquired := l.Stats().Acquired

	bounded, cancel := context.WithTimeout(ctx, guard)
	defer cancel()
	hs, err := txn.LockAll(bounded, recordlock.Options{Shared: true}, []byte("k0"), []byte("k0/x"))
	require.NoError(t, err, "the keys are inside the Txn's range")
	assert.Same(t, r, hs[0])
	assert.Same(t, r, hs[1])
	hs, err = txn.LockAll(bounded, node, []byte("k0"))
	require.NoError(t, err, "an exclusive range serves an exclusive request too")
	assert.Same(t, r, hs[0])
	assert.Equal(t, acquired, l.Stats().Acquired, "the table was not asked")

	hs, err = txn.LockAll(bounded, recordlock.Options{Shared: true, Hold: true}, []byte("k0"), []byte("k0/y"), []byte("z"))
	require.NoError(t, err)
	assert.Same(t, r, hs[0])
	assert.Same(t, r, hs[1])
	assert.NotSame(t, r, hs[2], "z is outside the range")
	assert.True(t, r.Hold(), "Hold upgrades the range once, as re-entry does")
	assert.Equal(t, acquired+1, l.Stats().Acquired)

	txn.Rollback()
	require.True(t, r.Release())
	require.True(t, hs[2].Release())
	require.True(t, granted(t, queued, "k0 after the range").Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// LockAllCF and LockCF of keys inside a range the Txn holds in that column family return the
// range's handle; the same keys in another column family are locks of their own.
func TestTxnLockAllCFInsideOwnRange(t *testing.T) {
	db, cfs := openCFDB(t, "orders")
	l := newLocker(t, db)
	ctx := context.Background()
	txn := l.Begin()
	defer txn.Rollback()
	r, err := txn.LockRangeCF(ctx, cfs[0], rng("k0", "k1"), node)
	require.NoError(t, err)
	acquired := l.Stats().Acquired

	hs, err := txn.LockAllCF(ctx, cfs[0], shared, []byte("k0/a"), []byte("k0"))
	require.NoError(t, err)
	assert.Same(t, r, hs[0])
	assert.Same(t, r, hs[1])
	h, err := txn.LockCF(ctx, cfs[0], []byte("k0/b"), node)
	require.NoError(t, err)
	assert.Same(t, r, h)
	assert.Equal(t, acquired, l.Stats().Acquired, "the table was not asked")

	hs, err = txn.LockAll(ctx, node, []byte("k0/a"))
	require.NoError(t, err)
	assert.NotSame(t, r, hs[0], "the default column family has no range of the Txn")
	assert.Equal(t, acquired+1, l.Stats().Acquired)
}

// A shared range serves shared LockAll requests, not exclusive ones: an exclusive key inside it
// is a lock of its own, which passes the request that waits for the range.
func TestTxnLockAllInsideOwnSharedRange(t *testing.T) {
	ctx := context.Background()
	txn, s, queued := txnUnderSharedRangeWithWaiter(t)

	hs, err := txn.LockAll(ctx, shared, []byte("n"), []byte("o"))
	require.NoError(t, err)
	assert.Same(t, s, hs[0])
	assert.Same(t, s, hs[1])
	hs, err = txn.LockAll(ctx, node, []byte("n"), []byte("o"))
	require.NoError(t, err, "the request queued for n waits for the Txn's range, so the Txn passes it")
	assert.NotSame(t, s, hs[0])
	assert.NotSame(t, s, hs[1])
	require.NoError(t, txn.Put([]byte("n"), []byte("v")))
	assert.True(t, pendingLock(queued))
	require.NoError(t, txn.Commit())
	require.True(t, granted(t, queued, "n after the Txn").Release())
}

// A writer holding key a that asks for key b with LockAll, while a reader's shared range over both
// waits for a, is granted b: the reader waits for the writer, so queueing behind it would be a
// deadlock, which is what ordered writers beside a range reader met.
func TestTxnLockAllPassesRangeWaitingForIt(t *testing.T) {
	_, _, l, _ := lockerPair(t)
	ctx := context.Background()
	writer, reader := txnNamed(t, l, "writer"), txnNamed(t, l, "reader")
	_, err := writer.Lock(ctx, []byte("p/a"), node)
	require.NoError(t, err)
	read := txnLockRangeAsync(t, reader, recordlock.Prefix([]byte("p/")), recordlock.Options{Shared: true, Timeout: time.Minute})
	waitingCount(t, l, 1)

	hs, err := writer.LockAll(ctx, wait, []byte("p/b"), []byte("p/a"))
	require.NoError(t, err, "the writer passes the reader's range, which waits for its p/a")
	require.NoError(t, writer.Put([]byte("p/b"), []byte("1")))
	assert.True(t, pendingLock(read))
	require.NoError(t, writer.Commit())
	got := granted(t, read, "the reader's range after the writer")
	assert.Len(t, hs, 2)
	require.True(t, got.Release())
	assert.Zero(t, l.Stats().Deadlocks)
}

// Writers that move units between two keys, each locking both with one LockAll, beside a reader
// that totals the keys' prefix under a shared range: Txns that lock in one order never deadlock,
// and every total the reader commits sees all the units.
func TestTxnOrderedWritersBesideRangeReader(t *testing.T) {
	db := openDB(t)
	l := newLocker(t, db)
	ctx := context.Background()
	const writers, moves, units = 4, 40, 1000
	keys := [][]byte{[]byte("acct/a"), []byte("acct/b")}
	dbPut(t, db, string(keys[0]), strconv.Itoa(units))
	dbPut(t, db, string(keys[1]), "0")
	opts := recordlock.Options{Timeout: time.Minute}

	var wg sync.WaitGroup
	errs := make(chan error, writers+1)
	stop := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			for n := range moves {
				if err := moveUnit(ctx, l, opts, keys[(w+n)%2], keys[(w+n+1)%2]); err != nil {
					errs <- fmt.Errorf("writer %d, move %d: %w", w, n, err)
					return
				}
			}
		})
	}
	var totals int
	var reads sync.WaitGroup
	reads.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			total, err := totalUnder(ctx, l, recordlock.Prefix([]byte("acct/")))
			if err != nil {
				errs <- fmt.Errorf("reader: %w", err)
				return
			}
			if total != units {
				errs <- fmt.Errorf("reader: the prefix totals %d under its shared range, not %d", total, units)
				return
			}
			totals++
		}
	})
	wg.Wait()
	close(stop)
	reads.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Zero(t, l.Stats().Deadlocks, "ordered writers beside a range reader never deadlock")
	t.Logf("%d moves and %d totals", writers*moves, totals)
}

// moveUnit moves one unit from one key to the other in one Txn that locks both with LockAll.
func moveUnit(ctx context.Context, l *recordlock.Locker, opts recordlock.Options, from, to []byte) error {
	txn := l.Begin()
	defer txn.Rollback()
	if _, err := txn.LockAll(ctx, opts, from, to); err != nil {
		return err
	}
	for k, d := range map[string]int{string(from): -1, string(to): 1} {
		v, err := txn.Get([]byte(k))
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(string(v))
		if err != nil {
			return err
		}
		if err := txn.Put([]byte(k), strconv.AppendInt(nil, int64(n+d), 10)); err != nil {
			return err
		}
	}
	return txn.Commit()
}

// totalUnder sums the values under r in one Txn that holds r shared while it scans.
func totalUnder(ctx context.Context, l *recordlock.Locker, r recordlock.Range) (int, error) {
	txn := l.Begin()
	defer txn.Rollback()
	if _, err := txn.LockRange(ctx, r, recordlock.Options{Shared: true, Timeout: time.Minute}); err != nil {
		return 0, err
	}
	total := 0
	err := txn.Scan(r, func(_, value []byte) error {
		n, err := strconv.Atoi(string(value))
		total += n
		return err
	})
	if err != nil {
		return 0, err
	}
	return total, txn.Commit()
}
