package recordlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// Shared locks in a Txn (docs/DESIGN.md §15): re-entrancy with modes, upgrades, writes, LockAll.

// A shared request for a key the Txn holds in either mode returns the handle it has, without
// touching the table (a writer queued for the key does not hold it up); the mode stays.
func TestTxnSharedReentry(t *testing.T) {
	_, _, l, other := lockerPair(t)
	ctx := context.Background()
	txn := l.Begin()
	defer txn.Rollback()

	s, err := txn.Lock(ctx, []byte("s"), shared)
	require.NoError(t, err)
	x, err := txn.Lock(ctx, []byte("x"), recordlock.Options{})
	require.NoError(t, err)
	ws := lockAsync(ctx, other, []byte("s"), wait)
	waitQueued(t, other, []byte("s"), 1)

	again, err := txn.Lock(ctx, []byte("s"), shared)
	require.NoError(t, err)
	assert.Same(t, s, again)
	assert.True(t, again.Shared())
	weaker, err := txn.Lock(ctx, []byte("x"), shared)
	require.NoError(t, err)
	assert.Same(t, x, weaker, "an exclusive lock is at least as strong")
	assert.False(t, weaker.Shared(), "a shared request does not downgrade")
	hs, err := txn.LockAll(ctx, shared, []byte("x"), []byte("s"))
	require.NoError(t, err)
	assert.Same(t, x, hs[0])
	assert.Same(t, s, hs[1])
	assert.False(t, x.Shared())
	assert.True(t, s.Shared())

	txn.Rollback()
	require.True(t, granted(t, ws, "the lock").Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A Txn writes only under an exclusive lock: Put and Delete of a key it holds shared fail with an
// error matching ErrNotLocked that says the key is held shared, and stage nothing; after an
// upgrade the same handle authorizes the write.
func TestTxnWriteUnderSharedLockRefused(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	dbPut(t, db, "k", "committed")
	for _, unlocked := range []bool{false, true} {
		txn, err := l.BeginTx(recordlock.TxnOptions{AllowUnlockedWrites: unlocked})
		require.NoError(t, err)
		h, err := txn.Lock(ctx, []byte("k"), shared)
		require.NoError(t, err)
		for name, write := range map[string]func() error{
			"Put":    func() error { return txn.Put([]byte("k"), []byte("new")) },
			"Delete": func() error { return txn.Delete([]byte("k")) },
		} {
			err := write()
			require.ErrorIs(t, err, recordlock.ErrNotLocked, "%s (AllowUnlockedWrites=%v)", name, unlocked)
			assert.Contains(t, err.Error(), "shared")
		}
		v, err := txn.Get([]byte("k"))
		require.NoError(t, err)
		assert.Equal(t, "committed", string(v), "nothing was staged")

		up, err := txn.Lock(ctx, []byte("k"), recordlock.Options{})
		require.NoError(t, err)
		assert.Same(t, h, up)
		require.NoError(t, txn.Put([]byte("k"), []byte("new")))
		txn.Rollback()
	}
	assert.Equal(t, "committed", string(dbGet(t, db, "k")))
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A sole sharer upgrades at once, even with requests queued for the key: the same handle becomes
// exclusive and keeps its lease and AcquiredAt, and the queued requests keep waiting.
func TestTxnUpgradeOfSoleSharerIsImmediate(t *testing.T) {
	db, clk, l, other := lockerPair(t)
	ctx := context.Background()
	key := []byte("k")
	txn := l.Begin()
	defer txn.Rollback()
	h, err := txn.Lock(ctx, key, recordlock.Options{Shared: true, Lease: time.Second})
	require.NoError(t, err)
	acquired, expires := h.AcquiredAt(), h.ExpiresAt()
	x := lockAsync(ctx, other, key, wait)
	waitQueued(t, l, key, 1)
	s := lockAsync(ctx, other, key, sharedWait)
	waitQueued(t, l, key, 2)

	clk.Advance(500 * time.Millisecond)
	up, err := txn.Lock(ctx, key, recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	assert.Same(t, h, up)
	assert.False(t, h.Shared())
	assert.Equal(t, acquired, h.AcquiredAt())
	assert.Equal(t, expires, h.ExpiresAt(), "an upgrade keeps the lease")
	assert.Equal(t, 2, recordlock.ProbeQueuedWaiters(l, key))
	require.NoError(t, txn.Put(key, []byte("v")))
	require.NoError(t, txn.Commit())
	assert.Equal(t, "v", string(dbGet(t, db, "k")))

	require.True(t, granted(t, x, "the lock").Release())
	require.True(t, granted(t, s, "the lock").Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// An upgrade waits until the Txn's share is the only one, ahead of every request queued before
// it; while it waits it counts in Stats.Waiting and in the key's Waiters, and the release of the
// last other share grants it directly.
func TestTxnUpgradeWaitsForOtherSharers(t *testing.T) {
	_, clk, l, other := lockerPair(t)
	ctx := context.Background()
	key := []byte("k")
	txn := txnNamed(t, l, "upgrader")
	h, err := txn.Lock(ctx, key, shared)
	require.NoError(t, err)
	o1, err := other.TryLock(key, shared)
	require.NoError(t, err)
	o2, err := other.TryLock(key, shared)
	require.NoError(t, err)
	x := lockAsync(ctx, other, key, wait) // queued before the upgrade
	waitQueued(t, l, key, 1)

	up := txnLockAsync(t, txn, key, wait)
	waitQueued(t, l, key, 2)
	waitingCount(t, l, 2)
	sharers := collectLocks(l)
	require.Len(t, sharers, 3, "one entry per share")
	for _, info := range sharers {
		assert.Equal(t, 2, info.Waiters, "the upgrade is one of the key's waiters")
		assert.True(t, info.Shared)
	}
	require.True(t, o1.Release())
	assert.True(t, pendingLock(up), "another share is left")
	assert.True(t, h.Shared())
	clk.Advance(time.Millisecond)
	require.True(t, o2.Release())
	assert.False(t, h.Shared(), "the last other share's release granted the upgrade")
	assert.Equal(t, 1, recordlock.ProbeQueuedWaiters(l, key), "the writer queued first still waits")
	r := testutil.Await(t, up, "the lock")
	require.NoError(t, r.err)
	assert.Same(t, h, r.h)
	infos := collectLocks(l)
	require.Len(t, infos, 1)
	assert.False(t, infos[0].Shared)
	assert.Equal(t, "upgrader", infos[0].Owner)
	assert.Equal(t, 1, l.Stats().Held)

	require.NoError(t, txn.Commit())
	require.True(t, granted(t, x, "the lock").Release())
	assert.Equal(t, 0, l.Stats().Waiting)
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// An upgrade that fails by timeout or ctx leaves the handle shared and unchanged, queues nothing,
// and the requests it held up are served.
func TestTxnFailedUpgradeLeavesShareUnchanged(t *testing.T) {
	for _, how := range []string{"timeout", "cancel"} {
		t.Run(how, func(t *testing.T) {
			_, clk, l, other := lockerPair(t)
			ctx := context.Background()
			key := []byte("k")
			txn := l.Begin()
			t.Cleanup(txn.Rollback)
			h, err := txn.Lock(ctx, key, recordlock.Options{Shared: true, Lease: time.Minute})
			require.NoError(t, err)
			o, err := other.TryLock(key, shared)
			require.NoError(t, err)
			acquired, expires := h.AcquiredAt(), h.ExpiresAt()

			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			up := txnLockCtxAsync(t, cctx, txn, key, recordlock.Options{Timeout: time.Second})
			waitQueued(t, l, key, 1)
			reader := lockAsync(ctx, other, key, sharedWait) // queued behind the upgrade
			waitQueued(t, l, key, 2)
			if how == "timeout" {
				clk.Advance(time.Second)
				require.ErrorIs(t, testutil.Await(t, up, "the lock").err, recordlock.ErrTimeout)
			} else {
				cancel()
				require.ErrorIs(t, testutil.Await(t, up, "the lock").err, context.Canceled)
			}
			assert.True(t, h.Shared())
			assert.False(t, h.IsExpired())
			assert.Equal(t, acquired, h.AcquiredAt())
			assert.Equal(t, expires, h.ExpiresAt())
			rr := testutil.Await(t, reader, "the lock")
			require.NoError(t, rr.err, "the reader behind the failed upgrade joins the sharers")
			assert.Equal(t, 3, l.Stats().Held)
			require.ErrorIs(t, txn.Put(key, []byte("v")), recordlock.ErrNotLocked)

			require.True(t, rr.h.Release())
			require.True(t, o.Release())
			up2, err := txn.Lock(ctx, key, recordlock.Options{})
			require.NoError(t, err, "the sole sharer upgrades now")
			assert.Same(t, h, up2)
			require.NoError(t, txn.Commit())
			assert.True(t, recordlock.ProbeTableEmpty(l))
		})
	}
}

// If the share ends while its upgrade waits, the upgrade fails at once: ErrLeaseExpired for a
// lapse or a revocation, ErrReleased for a release from another goroutine, ErrClosed when the
// Locker closes.
func TestTxnUpgradeFailsWhenShareEnds(t *testing.T) {
	for _, how := range []string{"lapse", "revoke", "release", "close"} {
		t.Run(how, func(t *testing.T) {
			_, clk, l, other := lockerPair(t)
			ctx := context.Background()
			key := []byte("k")
			txn := l.Begin()
			t.Cleanup(txn.Rollback)
			h, err := txn.Lock(ctx, key, recordlock.Options{Shared: true, Lease: time.Second})
			require.NoError(t, err)
			o, err := other.TryLock(key, recordlock.Options{Shared: true, Lease: time.Minute})
			require.NoError(t, err)
			up := txnLockAsync(t, txn, key, wait)
			waitQueued(t, l, key, 1)

			want := recordlock.ErrLeaseExpired
			switch how {
			case "lapse":
				clk.Advance(time.Second)
			case "revoke":
				h.RevokeLease()
			case "release":
				require.True(t, h.Release())
				want = recordlock.ErrReleased
			case "close":
				require.NoError(t, l.Close())
				want = recordlock.ErrClosed
			}
			require.ErrorIs(t, testutil.Await(t, up, "the lock").err, want)
			assert.Equal(t, 0, recordlock.ProbeQueuedWaiters(other, key))
			assert.Equal(t, 1, other.Stats().Held, "the other sharer keeps its share")
			assert.True(t, h.IsExpired())
			require.True(t, o.Release())
			assert.True(t, recordlock.ProbeTableEmpty(other))
		})
	}
}

// Two sharers that both upgrade wait for each other: exactly one gets ErrDeadlock, every round,
// and keeps its share until it rolls back; then the other's upgrade is granted.
func TestTwoUpgradersOneDeadlock(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	key := []byte("k")
	for round := range 300 {
		t1, t2 := l.Begin(), l.Begin()
		h1, err := t1.Lock(context.Background(), key, shared)
		require.NoError(t, err)
		h2, err := t2.Lock(context.Background(), key, shared)
		require.NoError(t, err)

		start := make(chan struct{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, txn := range []*recordlock.Txn{t1, t2} {
			wg.Go(func() {
				<-start
				_, errs[i] = txn.Lock(context.Background(), key, wait)
				if errs[i] != nil {
					h := []*recordlock.Handle{h1, h2}[i]
					assert.True(t, h.Shared(), "round %d: the victim keeps its share", round)
					assert.False(t, h.IsExpired(), "round %d: the victim keeps its share", round)
					txn.Rollback() // lets the survivor through
				}
			})
		}
		close(start)
		wg.Wait()
		victims := 0
		for i, err := range errs {
			if err != nil {
				require.ErrorIs(t, err, recordlock.ErrDeadlock, "round %d", round)
				victims++
			} else {
				assert.False(t, []*recordlock.Handle{h1, h2}[i].Shared(), "round %d: the survivor upgraded", round)
			}
		}
		require.Equal(t, 1, victims, "round %d: exactly one victim", round)
		t1.Rollback()
		t2.Rollback()
	}
	assert.Equal(t, uint64(300), l.Stats().Deadlocks)
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// LockAll with exclusive options upgrades the keys the Txn holds shared; when it fails, each
// upgrade it made is undone (the handle is shared again, lease unchanged) and the keys it took
// are released.
func TestTxnLockAllUpgradesAndUndoes(t *testing.T) {
	_, clk, l, other := lockerPair(t)
	ctx := context.Background()

	t.Run("success", func(t *testing.T) {
		txn := l.Begin()
		defer txn.Rollback()
		a, err := txn.Lock(ctx, []byte("a"), shared)
		require.NoError(t, err)
		hs, err := txn.LockAll(ctx, recordlock.Options{}, []byte("b"), []byte("a"))
		require.NoError(t, err)
		assert.Same(t, a, hs[1])
		assert.False(t, a.Shared())
		assert.False(t, hs[0].Shared())
		require.NoError(t, txn.Put([]byte("a"), []byte("v")))
		require.NoError(t, txn.Commit())
	})

	t.Run("failure", func(t *testing.T) {
		txn := l.Begin()
		t.Cleanup(txn.Rollback)
		a, err := txn.Lock(ctx, []byte("a"), recordlock.Options{Shared: true, Lease: time.Minute})
		require.NoError(t, err)
		c, err := txn.Lock(ctx, []byte("c"), shared)
		require.NoError(t, err)
		oc, err := other.TryLock([]byte("c"), shared) // c's upgrade must wait for it
		require.NoError(t, err)
		expires := a.ExpiresAt()
		clk.Advance(time.Millisecond)
		res := lockAllAsync(t, ctx, txn, recordlock.Options{Timeout: time.Second}, []byte("a"), []byte("b"), []byte("c"))
		waitQueued(t, l, []byte("c"), 1)
		assert.False(t, a.Shared(), "a, before c, was upgraded")
		// A reader queued behind a's upgrade is served once the upgrade is undone.
		reader := lockAsync(ctx, other, []byte("a"), sharedWait)
		waitQueued(t, l, []byte("a"), 1)
		clk.Advance(time.Second)
		require.ErrorIs(t, testutil.Await(t, res, "LockAll").err, recordlock.ErrTimeout)

		assert.True(t, a.Shared(), "a's upgrade was undone")
		assert.False(t, a.IsExpired())
		assert.Equal(t, expires, a.ExpiresAt(), "with its lease unchanged")
		assert.True(t, c.Shared())
		require.True(t, granted(t, reader, "the lock").Release())
		b, err := other.TryLock([]byte("b"), recordlock.Options{})
		require.NoError(t, err, "the key LockAll took was released")
		require.True(t, b.Release())
		require.True(t, oc.Release())
		txn.Rollback()
	})
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A shared lock with Hold outlives its Txn, with no owner, and still excludes writers.
func TestTxnSharedHoldOutlivesTxn(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	txn := txnNamed(t, l, "reader")
	h, err := txn.Lock(context.Background(), []byte("k"), recordlock.Options{Shared: true, Hold: true})
	require.NoError(t, err)
	require.NoError(t, txn.Commit())
	assert.False(t, h.IsExpired())
	infos := collectLocks(l)
	require.Len(t, infos, 1)
	assert.True(t, infos[0].Shared)
	assert.True(t, infos[0].Hold)
	assert.Empty(t, infos[0].Owner)
	_, err = l.TryLock([]byte("k"), recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked)
	require.True(t, h.Release())
}

// A shared lock protects what the Txn read under it: Commit of a Txn whose shared lease lapsed
// writes nothing and fails with ErrLeaseExpired, even with nothing staged under that lock.
func TestTxnCommitChecksSharedLocks(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	ctx := context.Background()
	txn := l.Begin()
	defer txn.Rollback()
	_, err := txn.Lock(ctx, []byte("price"), recordlock.Options{Shared: true, Lease: time.Second})
	require.NoError(t, err)
	_, err = txn.Lock(ctx, []byte("order"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("order"), []byte("placed")))
	clk.Advance(time.Second)
	err = txn.Commit()
	require.ErrorIs(t, err, recordlock.ErrLeaseExpired)
	assert.Nil(t, dbGet(t, db, "order"))

	ok := l.Begin()
	_, err = ok.Lock(ctx, []byte("price"), shared)
	require.NoError(t, err)
	_, err = ok.Lock(ctx, []byte("order"), recordlock.Options{})
	require.NoError(t, err)
	require.NoError(t, ok.Put([]byte("order"), []byte("placed")))
	require.NoError(t, ok.Commit())
	assert.Equal(t, "placed", string(dbGet(t, db, "order")))
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// The error of a write under a shared lock names the key.
func TestTxnSharedWriteErrorNamesKey(t *testing.T) {
	_, l := manual(t, openDB(t))
	txn := l.Begin()
	defer txn.Rollback()
	_, err := txn.Lock(context.Background(), []byte("the-key"), shared)
	require.NoError(t, err)
	err = txn.Put([]byte("the-key"), nil)
	require.Error(t, err)
	assert.True(t, errors.Is(err, recordlock.ErrNotLocked))
	assert.True(t, strings.Contains(err.Error(), "the-key"), err.Error())
}

// Waits reports each queued request's mode: a shared request, an exclusive one, and an upgrade
// (queued ahead of both), with the upgrading Txn's name.
func TestWaitsReportModes(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	key := []byte("k")
	up := txnNamed(t, l, "upgrader")
	h, err := up.Lock(ctx, key, shared)
	require.NoError(t, err)
	other, err := l.TryLock(key, shared)
	require.NoError(t, err)
	x := lockAsync(ctx, l, key, wait)
	waitQueued(t, l, key, 1)
	s := lockAsync(ctx, l, key, sharedWait)
	waitQueued(t, l, key, 2)
	u := txnLockAsync(t, up, key, wait)
	waitQueued(t, l, key, 3)

	var got []string
	for w := range l.Waits() {
		got = append(got, fmt.Sprintf("%s shared=%v upgrade=%v", w.Owner, w.Shared, w.Upgrade))
	}
	assert.Equal(t, []string{"upgrader shared=false upgrade=true", " shared=false upgrade=false", " shared=true upgrade=false"}, got)

	require.True(t, other.Release())
	require.NoError(t, testutil.Await(t, u, "the lock").err)
	assert.False(t, h.Shared())
	up.Rollback()
	require.True(t, granted(t, x, "the lock").Release())
	require.True(t, granted(t, s, "the lock").Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}
