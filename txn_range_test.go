package recordlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// Range locks in a Txn (docs/DESIGN.md §16.1): re-entry and upgrade, keys inside a range, writes
// under it, Commit's check and fence, savepoints, deadlocks.

// txnLockRangeAsync starts txn.LockRange in a goroutine and returns where its result arrives (see
// txnLockAsync).
func txnLockRangeAsync(t testing.TB, txn *recordlock.Txn, r recordlock.Range, opts recordlock.Options) <-chan lockResult {
	c := make(chan lockResult, 1)
	testutil.Go(t, context.Background(), func(ctx context.Context) {
		h, err := txn.LockRange(ctx, r, opts)
		c <- lockResult{h, err}
	})
	return c
}

// LockRange of exactly a range the Txn holds returns its handle for the same or a weaker mode, and
// upgrades a shared one asked exclusive; another range, even inside it, is a lock of its own.
func TestTxnLockRangeReentry(t *testing.T) {
	_, l := manual(t, openDB(t))
	ctx := context.Background()
	txn := l.Begin()
	defer txn.Rollback()

	x, err := txn.LockRange(ctx, rng("a", "c"), node)
	require.NoError(t, err)
	acquired := l.Stats().Acquired
	again, err := txn.LockRange(ctx, rng("a", "c"), node)
	require.NoError(t, err)
	assert.Same(t, x, again)
	weaker, err := txn.LockRange(ctx, rng("a", "c"), shared)
	require.NoError(t, err)
	assert.Same(t, x, weaker)
	assert.False(t, weaker.Shared(), "a shared request does not downgrade")
	assert.Equal(t, acquired, l.Stats().Acquired, "re-entry touches nothing")

	s, err := txn.LockRange(ctx, rng("m", ""), shared)
	require.NoError(t, err)
	up, err := txn.LockRange(ctx, rng("m", ""), node)
	require.NoError(t, err)
	assert.Same(t, s, up)
	assert.False(t, up.Shared(), "upgraded in place")

	inner, err := txn.LockRange(ctx, rng("a", "b"), node)
	require.NoError(t, err, "a Txn's own locks never conflict")
	assert.NotSame(t, x, inner)
	held, err := txn.LockRange(ctx, rng("a", "c"), recordlock.Options{Scope: recordlock.ScopeNode, Hold: true})
	require.NoError(t, err)
	assert.Same(t, x, held)
	assert.True(t, x.Hold(), "Hold upgrades the range")
	txn.Rollback()
	assert.False(t, x.IsExpired(), "a held range outlives its Txn")
	assert.True(t, s.IsExpired())
	assert.True(t, inner.IsExpired())
	require.True(t, x.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// An exclusive request for a shared range the Txn holds waits for the other sharers of its keys,
// ahead of the requests queued, and then makes the same handle exclusive.
func TestTxnLockRangeUpgradeWaits(t *testing.T) {
	_, _, l, other := lockerPair(t)
	ctx := context.Background()
	txn := l.Begin()
	t.Cleanup(txn.Rollback)
	s, err := txn.LockRange(ctx, rng("a", "c"), shared)
	require.NoError(t, err)
	b, err := other.Lock(ctx, []byte("b"), shared)
	require.NoError(t, err)

	up := txnLockRangeAsync(t, txn, rng("a", "c"), wait)
	waitingCount(t, l, 1)
	require.True(t, b.Release())
	h := granted(t, up, "the upgrade")
	assert.Same(t, s, h)
	assert.False(t, h.Shared())
	_, err = other.TryLock([]byte("b"), shared)
	require.ErrorIs(t, err, recordlock.ErrLocked)
}

// Txn.Lock of a key inside a range the Txn holds in a mode at least as strong returns the range's
// handle without touching the table, even with a request of another Locker queued for the key (with
// Hold, upgraded to Hold); a stronger mode, or a key outside, gets a lock of its own.
func TestTxnLockKeyInsideRange(t *testing.T) {
	_, _, l, other := lockerPair(t)
	ctx := context.Background()
	txn := l.Begin()
	defer txn.Rollback()
	x, err := txn.LockRange(ctx, rng("a", "c"), node)
	require.NoError(t, err)
	s, err := txn.LockRange(ctx, rng("m", "p"), shared)
	require.NoError(t, err)
	queued := lockAsync(ctx, other, []byte("b"), wait)
	waitingCount(t, l, 1)
	acquired := l.Stats().Acquired

	for _, opts := range []recordlock.Options{node, shared, {}} {
		h, err := txn.Lock(ctx, []byte("b"), opts)
		require.NoError(t, err)
		assert.Same(t, x, h, "%+v", opts)
	}
	h, err := txn.Lock(ctx, []byte("a"), node)
	require.NoError(t, err)
	assert.Same(t, x, h, "Start is in the range")
	h, err = txn.Lock(ctx, []byte("n"), shared)
	require.NoError(t, err)
	assert.Same(t, s, h)
	assert.Equal(t, acquired, l.Stats().Acquired, "the table was not asked")

	n, err := txn.Lock(ctx, []byte("n"), node)
	require.NoError(t, err, "the Txn's own shared range does not hold up its exclusive key")
	assert.NotSame(t, s, n)
	_, ok := n.Range()
	assert.False(t, ok)
	c, err := txn.Lock(ctx, []byte("c"), node)
	require.NoError(t, err)
	assert.NotSame(t, x, c, "End is outside the range")
	_, err = txn.Lock(ctx, []byte("b"), recordlock.Options{Scope: recordlock.ScopeCluster})
	require.ErrorIs(t, err, recordlock.ErrScopeConflict)
	assert.Equal(t, acquired+2, l.Stats().Acquired)
	hold, err := txn.Lock(ctx, []byte("b"), recordlock.Options{Scope: recordlock.ScopeNode, Hold: true})
	require.NoError(t, err, "a key request of the Txn's own would queue behind b's waiter, which waits for the range")
	assert.Same(t, x, hold, "Hold upgrades the range, as re-entry does")
	assert.True(t, x.Hold())
	assert.Equal(t, acquired+2, l.Stats().Acquired, "the table was not asked")

	txn.Rollback()
	assert.True(t, pendingLock(queued), "the held range outlives the Txn")
	require.True(t, x.Release())
	require.True(t, granted(t, queued, "b after the range").Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Put and Delete of keys inside a live exclusive range of the Txn need no key lock, and land at
// Commit; a key outside every lock is still refused.
func TestTxnWritesUnderExclusiveRange(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	dbPut(t, db, "order:7:2", "old")
	txn := l.Begin()
	defer txn.Rollback()
	_, err := txn.LockRange(ctx, recordlock.Prefix([]byte("order:7:")), node)
	require.NoError(t, err)

	require.NoError(t, txn.Put([]byte("order:7:1"), []byte("new")))
	require.NoError(t, txn.Delete([]byte("order:7:2")))
	require.ErrorIs(t, txn.Put([]byte("order:8:1"), []byte("x")), recordlock.ErrNotLocked)
	assert.Nil(t, dbGet(t, db, "order:7:1"), "nothing lands before Commit")
	require.NoError(t, txn.Commit())
	assert.Equal(t, "new", string(dbGet(t, db, "order:7:1")))
	assert.Nil(t, dbGet(t, db, "order:7:2"))
	assert.Nil(t, dbGet(t, db, "order:8:1"))
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Under a shared range only, Put and Delete fail with ErrNotLocked saying it is held shared, and
// stage nothing, even with AllowUnlockedWrites; with a key lock that ended, its error; the
// upgraded range authorizes them.
func TestTxnWriteUnderSharedRangeRefused(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	dbPut(t, db, "b", "committed")
	for _, unlocked := range []bool{false, true} {
		txn, err := l.BeginTx(recordlock.TxnOptions{AllowUnlockedWrites: unlocked})
		require.NoError(t, err)
		_, err = txn.LockRange(ctx, rng("a", "c"), shared)
		require.NoError(t, err)
		for name, write := range map[string]func() error{
			"Put":    func() error { return txn.Put([]byte("b"), []byte("new")) },
			"Delete": func() error { return txn.Delete([]byte("b")) },
		} {
			err := write()
			require.ErrorIs(t, err, recordlock.ErrNotLocked, "%s (AllowUnlockedWrites=%v)", name, unlocked)
			assert.Contains(t, err.Error(), "shared")
		}
		v, err := txn.Get([]byte("b"))
		require.NoError(t, err)
		assert.Equal(t, "committed", string(v), "nothing was staged")
		k, err := txn.Lock(ctx, []byte("b"), node)
		require.NoError(t, err)
		require.True(t, k.Release())
		require.ErrorIs(t, txn.Put([]byte("b"), []byte("new")), recordlock.ErrReleased, "the key lock's error comes first")
		_, err = txn.LockRange(ctx, rng("a", "c"), node)
		require.NoError(t, err)
		require.NoError(t, txn.Put([]byte("b"), []byte("new")))
		txn.Rollback()
	}
	assert.Equal(t, "committed", string(dbGet(t, db, "b")))
}

// A range lock's lapsed lease fails the Txn's Get and Scan inside it, and its Commit, which writes
// nothing, with ErrLeaseExpired, whether a write was staged under it or it only protected reads;
// a lapsed key lock inside a live range is replaced by the range for writes.
func TestTxnRangeLapseFailsCommit(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	ctx := context.Background()
	short := recordlock.Options{Scope: recordlock.ScopeNode, Lease: recordlock.MinLease}
	scanAll := func(txn *recordlock.Txn, r recordlock.Range) error {
		return txn.Scan(r, func(_, _ []byte) error { return nil })
	}
	dbPut(t, db, "b", "committed")

	for _, staged := range []bool{true, false} {
		txn := l.Begin()
		_, err := txn.LockRange(ctx, rng("a", "c"), short)
		require.NoError(t, err)
		other, err := txn.Lock(ctx, []byte("x"), node)
		require.NoError(t, err)
		if staged {
			require.NoError(t, txn.Put([]byte("b"), []byte("lost")))
			require.NoError(t, txn.Put([]byte("x"), []byte("lost")))
		}
		require.NoError(t, scanAll(txn, rng("", "")))
		clk.Advance(recordlock.MinLease)
		require.ErrorIs(t, scanAll(txn, rng("", "")), recordlock.ErrLeaseExpired)
		require.ErrorIs(t, scanAll(txn, rng("bb", "d")), recordlock.ErrLeaseExpired, "the scan shares keys with the range")
		require.NoError(t, scanAll(txn, rng("c", "")), "the scan is outside the range")
		_, err = txn.Get([]byte("b"))
		require.ErrorIs(t, err, recordlock.ErrLeaseExpired)
		_, err = txn.Get([]byte("x"))
		require.NoError(t, err)
		require.ErrorIs(t, txn.Put([]byte("b"), []byte("late")), recordlock.ErrLeaseExpired)
		require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired, "staged=%v", staged)
		assert.Equal(t, "committed", string(dbGet(t, db, "b")))
		assert.Nil(t, dbGet(t, db, "x"))
		assert.True(t, other.IsExpired(), "Commit released the Txn's locks")
	}
	assert.EqualValues(t, 2, l.Stats().Fenced)

	txn := l.Begin()
	defer txn.Rollback()
	k, err := txn.Lock(ctx, []byte("b"), short)
	require.NoError(t, err)
	_, err = txn.LockRange(ctx, rng("a", "c"), node)
	require.NoError(t, err)
	clk.Advance(recordlock.MinLease)
	require.True(t, k.IsLeaseExpired())
	require.NoError(t, txn.Put([]byte("bb"), []byte("under the range")))
	// The lapsed key lock of b is still checked (a read under it may be stale) and fails Commit.
	require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired)
	assert.Nil(t, dbGet(t, db, "bb"))
}

// A range released before Commit is not checked for reads, but a range protecting a staged write
// is, released or not.
func TestTxnCommitChecksReleasedRangeOnlyForWrites(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	ctx := context.Background()
	short := recordlock.Options{Scope: recordlock.ScopeNode, Lease: recordlock.MinLease}

	txn := l.Begin()
	r, err := txn.LockRange(ctx, rng("a", "c"), short)
	require.NoError(t, err)
	require.True(t, r.Release())
	clk.Advance(recordlock.MinLease)
	require.NoError(t, txn.Commit(), "a released range that protects nothing is not checked")

	txn = l.Begin()
	r, err = txn.LockRange(ctx, rng("a", "c"), short)
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("b"), []byte("v")))
	require.True(t, r.Release())
	clk.Advance(recordlock.MinLease)
	require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired)
	assert.Nil(t, dbGet(t, db, "b"))
}

// Locks are not part of a savepoint: RollbackToSavePoint keeps a range taken after the mark, as
// it keeps keys, but the range no longer protects the writes it discarded, so a Commit after the
// range was released and its lease ended succeeds.
func TestTxnRangeSavePoint(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	ctx := context.Background()
	txn := l.Begin()
	defer txn.Rollback()
	_, err := txn.Lock(ctx, []byte("k"), node)
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("k"), []byte("kept")))
	txn.SetSavePoint()
	r, err := txn.LockRange(ctx, rng("a", "c"), recordlock.Options{Scope: recordlock.ScopeNode, Lease: recordlock.MinLease})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("b"), []byte("dropped")))
	require.NoError(t, txn.RollbackToSavePoint())

	assert.False(t, r.IsExpired(), "the range is kept")
	again, err := txn.LockRange(ctx, rng("a", "c"), node)
	require.NoError(t, err)
	assert.Same(t, r, again)
	v, err := txn.Get([]byte("b"))
	require.NoError(t, err)
	assert.Nil(t, v)
	require.True(t, r.Release())
	clk.Advance(recordlock.MinLease)
	require.NoError(t, txn.Commit(), "the range protects no write any more")
	assert.Equal(t, "kept", string(dbGet(t, db, "k")))
	assert.Nil(t, dbGet(t, db, "b"))
}

// A deadlock through a range and a key: each Txn waits for the other's lock, and exactly one of
// them gets ErrDeadlock, keeping its locks; once it rolls back the other proceeds.
func TestTxnRangeDeadlock(t *testing.T) {
	_, _, l, _ := lockerPair(t)
	ctx := context.Background()
	t1, t2 := txnNamed(t, l, "t1"), txnNamed(t, l, "t2")
	_, err := t1.LockRange(ctx, rng("a", "c"), node)
	require.NoError(t, err)
	_, err = t2.Lock(ctx, []byte("x"), node)
	require.NoError(t, err)

	first := txnLockAsync(t, t1, []byte("x"), wait)
	second := txnLockRangeAsync(t, t2, rng("b", "bb"), wait)
	var results [2]lockResult
	select {
	case results[0] = <-first:
		t1.Rollback()
		results[1] = testutil.Await(t, second, "t2's range")
	case results[1] = <-second:
		t2.Rollback()
		results[0] = testutil.Await(t, first, "t1's key")
	case <-time.After(guard):
		t.Fatal("neither request returned: a missed deadlock")
	}
	deadlocks := 0
	for _, r := range results {
		if r.err != nil {
			var de *recordlock.DeadlockError
			require.True(t, errors.As(r.err, &de), "%v", r.err)
			deadlocks++
		}
	}
	assert.Equal(t, 1, deadlocks, "exactly one of the two gets ErrDeadlock")
	assert.EqualValues(t, 1, l.Stats().Deadlocks)
}

// The range request that closes a cycle is the one refused: T1 waits for T2's key, then T2's range
// would wait for T1's range. Its error names the cycle; T2 keeps its key and T1 proceeds once T2
// rolls back.
func TestTxnRangeClosesDeadlock(t *testing.T) {
	_, _, l, _ := lockerPair(t)
	ctx := context.Background()
	t1, t2 := txnNamed(t, l, "t1"), txnNamed(t, l, "t2")
	_, err := t1.LockRange(ctx, rng("a", "c"), node)
	require.NoError(t, err)
	x, err := t2.Lock(ctx, []byte("x"), node)
	require.NoError(t, err)
	first := txnLockAsync(t, t1, []byte("x"), wait)
	waitingCount(t, l, 1)

	_, err = t2.LockRange(ctx, rng("b", "bb"), wait)
	var de *recordlock.DeadlockError
	require.True(t, errors.As(err, &de), "%v", err)
	require.ErrorIs(t, err, recordlock.ErrDeadlock)
	assert.Len(t, de.Cycle, 2)
	assert.Equal(t, "t2", de.Cycle[0].Txn)
	assert.False(t, x.IsExpired(), "the victim keeps its locks")
	assert.True(t, pendingLock(first))
	t2.Rollback()
	require.NotNil(t, granted(t, first, "t1's key"))
}

// An exclusive key lock inside the Txn's own shared range is a lock of its own: it passes a
// request for the key that waits for the range (waiting behind it would be a deadlock), and the
// exclusive LockRange of the range is an upgrade and goes ahead of that request too.
func TestTxnExclusiveKeyUnderOwnSharedRange(t *testing.T) {
	ctx := context.Background()
	txn, s, queued := txnUnderSharedRangeWithWaiter(t)

	n, err := txn.Lock(ctx, []byte("n"), node)
	require.NoError(t, err, "the request for n waits for the Txn's range, so the Txn passes it")
	assert.NotSame(t, s, n)
	up, err := txn.LockRange(ctx, rng("m", "p"), node)
	require.NoError(t, err)
	assert.Same(t, s, up)
	require.NoError(t, txn.Put([]byte("n"), []byte("v")))
	assert.True(t, pendingLock(queued))
	require.NoError(t, txn.Commit())
	require.True(t, granted(t, queued, "n after the Txn").Release())
}
