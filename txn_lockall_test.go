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

// LockAll takes keys in bytewise order whatever order they are given in, and returns the handles
// in the order given.
func TestTxnLockAllOrderAndHandles(t *testing.T) {
	_, _, l, other := lockerPair(t)
	ctx := context.Background()

	b, err := other.Lock(ctx, []byte("b"), recordlock.Options{})
	require.NoError(t, err)
	txn := l.Begin()
	t.Cleanup(txn.Rollback)
	keys := [][]byte{[]byte("c"), []byte("a"), []byte("b")}
	res := lockAllAsync(t, ctx, txn, recordlock.Options{}, keys...)
	waitQueued(t, l, []byte("b"), 1)
	_, err = other.TryLock([]byte("a"), recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked, "a, before b, is taken")
	c, err := other.TryLock([]byte("c"), recordlock.Options{})
	require.NoError(t, err, "c, after b, is not taken yet")
	require.True(t, c.Release())
	require.True(t, b.Release())

	r := testutil.Await(t, res, "LockAll")
	require.NoError(t, r.err)
	require.Len(t, r.hs, len(keys))
	for i, k := range keys {
		assert.Equal(t, k, r.hs[i].Key(), "handle %d", i)
		assert.False(t, r.hs[i].IsExpired())
		_, err := other.TryLock(k, recordlock.Options{})
		require.ErrorIs(t, err, recordlock.ErrLocked, "%s is locked", k)
	}
	require.NoError(t, txn.Commit())
	for _, h := range r.hs {
		assert.True(t, h.IsExpired(), "Commit released %s", h.Key())
	}
}

// A key given twice gets one handle at both places; a key the Txn already holds keeps its handle
// (and with Hold is upgraded); writes to every key are protected.
func TestTxnLockAllDuplicatesAndReentry(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	txn := l.Begin()
	defer txn.Rollback()
	pre, err := txn.Lock(ctx, []byte("b"), recordlock.Options{})
	require.NoError(t, err)
	acquired := pre.AcquiredAt()

	hs, err := txn.LockAll(ctx, recordlock.Options{}, []byte("c"), []byte("a"), []byte("b"), []byte("a"))
	require.NoError(t, err)
	require.Len(t, hs, 4)
	assert.Same(t, hs[1], hs[3], "a duplicate key shares its handle")
	assert.Same(t, pre, hs[2], "a key the Txn holds is re-entered")
	assert.Equal(t, acquired, hs[2].AcquiredAt())
	assert.NotSame(t, hs[0], hs[1])
	assert.False(t, pre.Hold())

	again, err := txn.LockAll(ctx, recordlock.Options{Hold: true}, []byte("a"), []byte("b"))
	require.NoError(t, err)
	assert.Same(t, hs[1], again[0])
	assert.Same(t, pre, again[1])
	assert.True(t, pre.Hold(), "Hold upgrades re-entered keys")

	empty, err := txn.LockAll(ctx, recordlock.Options{})
	require.NoError(t, err)
	assert.Empty(t, empty)

	for _, k := range []string{"a", "b", "c"} {
		require.NoError(t, txn.Put([]byte(k), []byte("v")))
	}
	require.NoError(t, txn.Commit())
	for _, k := range []string{"a", "b", "c"} {
		assert.Equal(t, []byte("v"), dbGet(t, db, k))
	}
	assert.True(t, hs[1].Hold())
	assert.False(t, hs[0].Hold())
	assert.True(t, hs[0].IsExpired(), "c ended with the Txn")
	assert.False(t, pre.IsExpired(), "b, upgraded to Hold, outlives it")
	assert.True(t, pre.Release())
	assert.True(t, hs[1].Release())
}

// opts.Timeout bounds the whole LockAll: two keys, each freed before a wait of its own would
// time out, still make the call time out once; it then releases the key it took and keeps the
// Txn's earlier locks.
func TestTxnLockAllOneTimeout(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		firstFree, secondFree time.Duration // when the holders release k1 and then k2
		wantErr               error
	}{
		{name: "within the budget", firstFree: 400 * time.Millisecond, secondFree: 500 * time.Millisecond},
		{name: "past the budget in all", firstFree: 900 * time.Millisecond, secondFree: 900 * time.Millisecond, wantErr: recordlock.ErrTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, clk, l, other := lockerPair(t)
			ctx := context.Background()
			k1, k2 := []byte("k1"), []byte("k2")
			h1, err := other.Lock(ctx, k1, recordlock.Options{Lease: time.Minute})
			require.NoError(t, err)
			h2, err := other.Lock(ctx, k2, recordlock.Options{Lease: time.Minute})
			require.NoError(t, err)

			txn := l.Begin()
			t.Cleanup(txn.Rollback)
			pre, err := txn.Lock(ctx, []byte("pre"), recordlock.Options{Lease: time.Minute})
			require.NoError(t, err)
			res := lockAllAsync(t, ctx, txn, recordlock.Options{Timeout: time.Second, Lease: time.Minute}, k2, k1)
			waitQueued(t, l, k1, 1)
			clk.Advance(tc.firstFree)
			require.True(t, h1.Release())
			waitQueued(t, l, k2, 1) // the call holds k1 now and waits for k2
			clk.Advance(tc.secondFree)
			h2.Release() // past the budget the call already gave up
			r := testutil.Await(t, res, "LockAll")
			if tc.wantErr == nil {
				require.NoError(t, r.err)
				require.Len(t, r.hs, 2)
				assert.Equal(t, k2, r.hs[0].Key())
				assert.Equal(t, k1, r.hs[1].Key())
				require.NoError(t, txn.Commit())
				return
			}
			require.ErrorIs(t, r.err, tc.wantErr)
			assert.Nil(t, r.hs)
			for _, k := range [][]byte{k1, k2} {
				h, err := other.TryLock(k, recordlock.Options{})
				require.NoError(t, err, "%s is free: the failed call keeps nothing", k)
				assert.True(t, h.Release())
			}
			assert.False(t, pre.IsExpired(), "the Txn keeps the locks it held before")
			assert.Zero(t, recordlock.ProbeQueuedWaiters(l, k2), "nothing stays queued")
		})
	}
}

// With a zero Timeout and a ctx deadline, LockAll's budget on the Locker's clock is the time left
// until that deadline when the call started, not DefaultTimeout.
func TestTxnLockAllBudgetFromCtxDeadline(t *testing.T) {
	_, clk, l, other := lockerPair(t)
	h, err := other.Lock(context.Background(), []byte("b"), recordlock.Options{Lease: recordlock.MaxLease})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	txn := l.Begin()
	t.Cleanup(txn.Rollback)
	res := lockAllAsync(t, ctx, txn, recordlock.Options{}, []byte("a"), []byte("b"))
	waitQueued(t, l, []byte("b"), 1)
	clk.Advance(recordlock.DefaultTimeout + time.Second)
	require.Equal(t, 1, recordlock.ProbeQueuedWaiters(l, []byte("b")), "LockAll still waits past DefaultTimeout")
	clk.Advance(15 * time.Second) // 46 s: past the ctx deadline's 45 s, on the Locker's clock
	r := testutil.Await(t, res, "LockAll")
	require.ErrorIs(t, r.err, recordlock.ErrTimeout)
	assert.Nil(t, r.hs)
	a, err := other.TryLock([]byte("a"), recordlock.Options{})
	require.NoError(t, err, "the failed call released a")
	assert.True(t, a.Release())
	assert.True(t, h.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// LockAll is all or nothing when ctx is cancelled mid-call, and when it is handed bad input.
func TestTxnLockAllAllOrNothing(t *testing.T) {
	_, clk, l, other := lockerPair(t)
	ctx := context.Background()

	t.Run("cancelled", func(t *testing.T) {
		held, err := other.Lock(ctx, []byte("m"), recordlock.Options{})
		require.NoError(t, err)
		txn := l.Begin()
		t.Cleanup(txn.Rollback)
		pre, err := txn.Lock(ctx, []byte("pre"), recordlock.Options{})
		require.NoError(t, err)
		cctx, cancel := context.WithCancel(ctx)
		res := lockAllAsync(t, cctx, txn, recordlock.Options{}, []byte("z"), []byte("m"), []byte("a"), []byte("pre"))
		waitQueued(t, l, []byte("m"), 1)
		cancel()
		require.ErrorIs(t, testutil.Await(t, res, "LockAll").err, context.Canceled)
		for _, k := range []string{"a", "z"} {
			h, err := other.TryLock([]byte(k), recordlock.Options{})
			require.NoError(t, err, "%s is free", k)
			assert.True(t, h.Release())
		}
		assert.Zero(t, recordlock.ProbeQueuedWaiters(l, []byte("m")))
		assert.False(t, pre.IsExpired(), "a re-entered key stays locked")
		assert.True(t, held.Release())
	})

	t.Run("bad input", func(t *testing.T) {
		txn := l.Begin()
		defer txn.Rollback()
		_, err := txn.LockAll(ctx, recordlock.Options{}, []byte("a"), nil)
		require.ErrorIs(t, err, recordlock.ErrInvalidKey)
		_, err = txn.LockAll(ctx, recordlock.Options{Lease: time.Millisecond}, []byte("a"))
		require.ErrorIs(t, err, recordlock.ErrInvalidOptions)
		done, cancel := context.WithCancel(ctx)
		cancel()
		_, err = txn.LockAll(done, recordlock.Options{}, []byte("a"))
		require.ErrorIs(t, err, context.Canceled)
		h, err := other.TryLock([]byte("a"), recordlock.Options{})
		require.NoError(t, err, "nothing was locked")
		assert.True(t, h.Release())
	})

	t.Run("scope conflict", func(t *testing.T) {
		l.SetCoordinator(grantAll{clk})
		defer l.RemoveCoordinator(true)
		txn := l.Begin()
		defer txn.Rollback()
		_, err := txn.Lock(ctx, []byte("n"), recordlock.Options{Scope: recordlock.ScopeNode})
		require.NoError(t, err)
		_, err = txn.LockAll(ctx, recordlock.Options{}, []byte("a"), []byte("n"))
		require.ErrorIs(t, err, recordlock.ErrScopeConflict)
		h, err := other.TryLock([]byte("a"), recordlock.Options{Scope: recordlock.ScopeNode})
		require.NoError(t, err, "a scope conflict fails before anything is locked")
		assert.True(t, h.Release())
	})

	t.Run("after the Txn ended", func(t *testing.T) {
		txn := l.Begin()
		txn.Rollback()
		_, err := txn.LockAll(ctx, recordlock.Options{}, []byte("a"))
		require.ErrorIs(t, err, recordlock.ErrTxnDone)
	})
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A LockAll with Hold that fails leaves the Txn's earlier locks as they were: the Txn holds a
// (1 min) and b (200 ms), another Locker holds c; LockAll(Hold, a, b, c) waits for c, b lapses,
// c is released. The call fails on b without upgrading a, so Rollback still releases a.
func TestTxnLockAllHoldFailureLeavesEarlierLocksUnchanged(t *testing.T) {
	_, clk, l, other := lockerPair(t)
	ctx := context.Background()
	c, err := other.Lock(ctx, []byte("c"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)

	txn := l.Begin()
	t.Cleanup(txn.Rollback)
	a, err := txn.Lock(ctx, []byte("a"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	b, err := txn.Lock(ctx, []byte("b"), recordlock.Options{Lease: 200 * time.Millisecond})
	require.NoError(t, err)
	expiresAt, version := a.ExpiresAt(), a.HolderVersionCandidate(0)

	res := lockAllAsync(t, ctx, txn, recordlock.Options{Hold: true}, []byte("a"), []byte("b"), []byte("c"))
	waitQueued(t, l, []byte("c"), 1)
	clk.Advance(200 * time.Millisecond)
	require.True(t, b.IsLeaseExpired())
	require.True(t, c.Release())
	r := testutil.Await(t, res, "LockAll")
	require.ErrorIs(t, r.err, recordlock.ErrLeaseExpired)
	assert.Nil(t, r.hs)

	assert.False(t, a.Hold(), "a is not upgraded")
	assert.Equal(t, expiresAt, a.ExpiresAt(), "a keeps its lease")
	assert.Equal(t, version, a.HolderVersionCandidate(0), "a's version counter did not step")
	assert.False(t, a.IsExpired())
	c2, err := other.TryLock([]byte("c"), recordlock.Options{})
	require.NoError(t, err, "the key this call took is released")
	assert.True(t, c2.Release())

	txn.Rollback()
	a2, err := other.TryLock([]byte("a"), recordlock.Options{})
	require.NoError(t, err, "Rollback released a: the failed LockAll left it without Hold")
	assert.True(t, a2.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Every handle LockAll returns is live when it returns: a lock that ended while the call waited
// for a later key fails the call, all or nothing.
func TestTxnLockAllFailsOnLockEndedDuringWait(t *testing.T) {
	for _, tc := range []struct {
		name string
		// end ends a lock while LockAll waits for "b"; pre is the Txn's earlier lock of "a", nil
		// when the call takes "a" itself.
		end     func(t *testing.T, clk *recordlock.ManualClock, pre *recordlock.Handle)
		pre     bool
		wantErr error
	}{
		{name: "a taken by the call lapses", wantErr: recordlock.ErrLeaseExpired,
			end: func(_ *testing.T, clk *recordlock.ManualClock, _ *recordlock.Handle) {
				clk.Advance(200 * time.Millisecond)
			}},
		{name: "a held before lapses", pre: true, wantErr: recordlock.ErrLeaseExpired,
			end: func(_ *testing.T, clk *recordlock.ManualClock, _ *recordlock.Handle) {
				clk.Advance(200 * time.Millisecond)
			}},
		{name: "a held before is revoked", pre: true, wantErr: recordlock.ErrLeaseExpired,
			end: func(_ *testing.T, _ *recordlock.ManualClock, pre *recordlock.Handle) { pre.RevokeLease() }},
		{name: "a held before is released by another goroutine", pre: true, wantErr: recordlock.ErrReleased,
			end: func(t *testing.T, _ *recordlock.ManualClock, pre *recordlock.Handle) {
				done := make(chan bool)
				go func() { done <- pre.Release() }()
				require.True(t, <-done)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, clk, l, other := lockerPair(t)
			ctx := context.Background()
			b, err := other.Lock(ctx, []byte("b"), recordlock.Options{Lease: time.Minute})
			require.NoError(t, err)

			txn := l.Begin()
			t.Cleanup(txn.Rollback)
			var pre *recordlock.Handle
			if tc.pre {
				pre, err = txn.Lock(ctx, []byte("a"), recordlock.Options{Lease: 200 * time.Millisecond})
				require.NoError(t, err)
			}
			res := lockAllAsync(t, ctx, txn, recordlock.Options{Lease: 200 * time.Millisecond}, []byte("a"), []byte("b"))
			waitQueued(t, l, []byte("b"), 1)
			tc.end(t, clk, pre)
			rival, err := other.TryLock([]byte("a"), recordlock.Options{})
			require.NoError(t, err, "a passed on while the call waited")
			require.True(t, b.Release())
			r := testutil.Await(t, res, "LockAll")
			require.ErrorIs(t, r.err, tc.wantErr)
			assert.Nil(t, r.hs)

			b2, err := other.TryLock([]byte("b"), recordlock.Options{})
			require.NoError(t, err, "the failed call released b")
			assert.True(t, b2.Release())
			assert.False(t, rival.IsExpired(), "the rival keeps a")
			assert.True(t, rival.Release())
			assert.True(t, recordlock.ProbeTableEmpty(l))
		})
	}
}

// The same key in two column families is two records: each is locked on its own, and LockAllCF
// and the Locker's LockCF see only their family.
func TestColumnFamiliesLockIndependently(t *testing.T) {
	db, cfs := openCFDB(t, "one", "two")
	one, two := cfs[0], cfs[1]
	// The system clock: a wait for a busy record must be able to time out.
	l, other := newLocker(t, db), newLocker(t, db)
	ctx := context.Background()
	key := []byte("k")

	plain, err := other.Lock(ctx, key, recordlock.Options{})
	require.NoError(t, err)
	inOne, err := other.LockCF(ctx, one, key, recordlock.Options{})
	require.NoError(t, err)
	assert.Equal(t, uint32(0), plain.ColumnFamilyID())
	assert.Equal(t, one.ID(), inOne.ColumnFamilyID())

	txn := l.Begin()
	defer txn.Rollback()
	hs, err := txn.LockAllCF(ctx, two, recordlock.Options{Timeout: time.Millisecond}, key, []byte("j"))
	require.NoError(t, err, "k in a third family is free")
	assert.Equal(t, two.ID(), hs[0].ColumnFamilyID())
	_, err = other.TryLockCF(two, key, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked)
	_, err = txn.LockCF(ctx, one, key, recordlock.Options{Timeout: time.Millisecond})
	require.ErrorIs(t, err, recordlock.ErrTimeout, "k in family one is held by the other Locker")
	again, err := txn.LockCF(ctx, two, key, recordlock.Options{})
	require.NoError(t, err)
	assert.Same(t, hs[0], again, "re-entry is per record")

	require.True(t, inOne.Release())
	mine, err := txn.LockCF(ctx, one, key, recordlock.Options{})
	require.NoError(t, err)
	assert.NotSame(t, hs[0], mine)
	assert.False(t, plain.IsExpired(), "locking k in other families left the default one alone")
	require.NoError(t, txn.Commit())
	_, err = other.TryLockCF(two, key, recordlock.Options{})
	require.NoError(t, err, "Commit released k in family two")
	assert.True(t, plain.Release())
}

// LockAll is all or nothing on ErrDeadlock too: the keys it took before the deadlocked one are
// released, and the Txn's earlier locks are kept.
func TestLockAllReleasesItsKeysOnDeadlock(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	t1, t2 := l.Begin(), l.Begin()
	t.Cleanup(t1.Rollback)
	defer t2.Rollback()
	_, err := t1.Lock(ctx, []byte("m"), recordlock.Options{})
	require.NoError(t, err)
	pre, err := t2.Lock(ctx, []byte("z"), recordlock.Options{})
	require.NoError(t, err)
	t1Waits := txnLockAsync(t, t1, []byte("z"), recordlock.Options{})
	waitQueued(t, l, []byte("z"), 1)

	// t2 takes a, then would wait for m, held by t1, which waits for z, held by t2.
	_, err = t2.LockAll(ctx, recordlock.Options{}, []byte("m"), []byte("a"))
	require.ErrorIs(t, err, recordlock.ErrDeadlock)
	h, err := l.TryLock([]byte("a"), recordlock.Options{})
	require.NoError(t, err, "the key LockAll took before the deadlock was released")
	require.True(t, h.Release())
	assert.False(t, pre.IsExpired(), "the Txn's earlier lock is kept")

	t2.Rollback()
	require.NoError(t, testutil.Await(t, t1Waits, "Lock").err)
	t1.Rollback()
	assert.True(t, recordlock.ProbeTableEmpty(l))
}
