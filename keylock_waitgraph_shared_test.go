package recordlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// Deadlock detection over both modes, with ports of RocksDB's SharedLocks, DeadlockCycleShared
// and DeadlockStress cases (utilities/transactions/transaction_test.cc).

// The scenarios of RocksDB's SharedLocks: three Txns share a key; two sharers hold off a writer
// until both have let go; a sharer's upgrade waits for the other sharer; a shared request of an
// exclusive holder keeps the exclusive lock; an exclusive holder holds off a reader. A RocksDB
// UndoGetForUpdate is a Release of the handle here, and its 1 µs lock timeout a 1 ms Timeout
// advanced on a ManualClock.
func TestSharedLocksScenarios(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	ctx := context.Background()
	key := []byte("foo")
	dbPut(t, db, "foo", "bar")
	const timeout = time.Millisecond
	excl := recordlock.Options{Timeout: timeout}
	shr := recordlock.Options{Timeout: timeout, Shared: true}
	begin := func() [3]*recordlock.Txn {
		return [3]*recordlock.Txn{txnNamed(t, l, "txn1"), txnNamed(t, l, "txn2"), txnNamed(t, l, "txn3")}
	}
	end := func(txns [3]*recordlock.Txn) {
		for _, txn := range txns {
			txn.Rollback()
		}
		require.True(t, recordlock.ProbeTableEmpty(l))
	}

	// Shared access between Txns: one key, three holders, all shared.
	txns := begin()
	for _, txn := range txns {
		_, err := txn.Lock(ctx, key, shr)
		require.NoError(t, err)
	}
	infos := collectLocks(l)
	require.Len(t, infos, 3)
	owners := map[string]bool{}
	for _, info := range infos {
		assert.Equal(t, key, info.Key)
		assert.True(t, info.Shared)
		owners[info.Owner] = true
	}
	assert.Equal(t, map[string]bool{"txn1": true, "txn2": true, "txn3": true}, owners)
	end(txns)

	// txn1 and txn2 share the lock and txn3 tries to take it exclusively.
	txns = begin()
	h1, err := txns[0].Lock(ctx, key, shr)
	require.NoError(t, err)
	h2, err := txns[1].Lock(ctx, key, shr)
	require.NoError(t, err)
	timesOut(t, clk, l, key, timeout, func() error { _, err := txns[2].Lock(ctx, key, excl); return err })
	require.True(t, h1.Release())
	timesOut(t, clk, l, key, timeout, func() error { _, err := txns[2].Lock(ctx, key, excl); return err })
	require.True(t, h2.Release())
	h3, err := txns[2].Lock(ctx, key, excl)
	require.NoError(t, err)
	assert.False(t, h3.Shared())
	end(txns)

	// txn1 and txn2 share the lock and txn2 tries to upgrade it.
	txns = begin()
	h1, err = txns[0].Lock(ctx, key, shr)
	require.NoError(t, err)
	h2, err = txns[1].Lock(ctx, key, shr)
	require.NoError(t, err)
	timesOut(t, clk, l, key, timeout, func() error { _, err := txns[1].Lock(ctx, key, excl); return err })
	assert.True(t, h2.Shared(), "the failed upgrade left the share")
	require.True(t, h1.Release())
	up, err := txns[1].Lock(ctx, key, excl)
	require.NoError(t, err)
	assert.Same(t, h2, up)
	assert.False(t, h2.Shared())
	end(txns)

	// txn1 holds the lock exclusively and asks for it shared: it keeps the exclusive lock, and
	// txn2's shared request still waits.
	txns = begin()
	h1, err = txns[0].Lock(ctx, key, excl)
	require.NoError(t, err)
	timesOut(t, clk, l, key, timeout, func() error { _, err := txns[1].Lock(ctx, key, shr); return err })
	again, err := txns[0].Lock(ctx, key, shr)
	require.NoError(t, err)
	assert.Same(t, h1, again)
	assert.False(t, h1.Shared())
	timesOut(t, clk, l, key, timeout, func() error { _, err := txns[1].Lock(ctx, key, shr); return err })
	end(txns)

	// txn1 holds the lock exclusively and txn2 asks for it shared.
	txns = begin()
	h1, err = txns[0].Lock(ctx, key, excl)
	require.NoError(t, err)
	timesOut(t, clk, l, key, timeout, func() error { _, err := txns[1].Lock(ctx, key, shr); return err })
	require.True(t, h1.Release())
	h2, err = txns[1].Lock(ctx, key, shr)
	require.NoError(t, err)
	assert.True(t, h2.Shared())
	end(txns)
	assert.Equal(t, uint64(6), l.Stats().Timeouts)
}

// RocksDB's DeadlockCycleShared: 31 Txns in a binary tree, Tn holding key n/2 shared, each of the
// 15 inner Txns waiting to take its own key exclusively, held shared by its two children. Each of
// the 16 leaves that then asks for key 0 (held shared by the root) exclusively closes a cycle
// through its ancestors and gets ErrDeadlock naming them; once the leaves roll back, the tree
// unwinds. Then the small case: of two Txns holding one key each exclusively, the one that asks for
// the other's key shared, while the other waits for its key, closes a cycle of two.
func TestDeadlockCycleShared(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	opts := recordlock.Options{Timeout: recordlock.MaxTimeout}
	name := func(i int) string { return fmt.Sprint("T", i+1) }
	key := func(n int) []byte { return []byte(strconv.Itoa(n)) }

	const n = 31
	txns := make([]*recordlock.Txn, n)
	for i := range txns {
		txns[i] = txnNamed(t, l, name(i))
		_, err := txns[i].Lock(ctx, key((i+1)/2), recordlock.Options{Shared: true})
		require.NoError(t, err)
	}
	waits := make([]<-chan lockResult, 15)
	for i := range waits {
		waits[i] = txnLockAsync(txns[i], key(i+1), opts)
	}
	waitingCount(t, l, 15)

	for i := 15; i < n; i++ {
		_, err := txns[i].Lock(ctx, key(0), opts)
		require.ErrorIs(t, err, recordlock.ErrDeadlock, "leaf %s", name(i))
		var dl *recordlock.DeadlockError
		require.ErrorAs(t, err, &dl)
		// The cycle runs from the leaf to the root and down its ancestors back to the leaf.
		var path []string
		for j := i; ; j = (j - 1) / 2 {
			path = append(path, name(j))
			if j == 0 {
				break
			}
		}
		require.Len(t, dl.Cycle, len(path), "leaf %s: %v", name(i), dl)
		assert.Equal(t, name(i), dl.Cycle[0].Txn)
		assert.Equal(t, key(0), dl.Cycle[0].Key)
		got := map[string]bool{}
		for _, w := range dl.Cycle {
			got[w.Txn] = true
		}
		for _, p := range path {
			assert.True(t, got[p], "leaf %s: %s is on the cycle %v", name(i), p, dl)
		}
		assert.Zero(t, recordlock.ProbeQueuedWaiters(l, key(0)), "the refused request queued nothing")
	}
	assert.Equal(t, uint64(16), l.Stats().Deadlocks)
	for i := 15; i < n; i++ {
		txns[i].Rollback()
	}
	for i := 14; i >= 0; i-- { // children before parents
		r := await(t, waits[i], "the lock")
		require.NoError(t, r.err, "%s", name(i))
		assert.False(t, r.h.Shared())
		txns[i].Rollback()
	}
	assert.True(t, recordlock.ProbeTableEmpty(l))

	// The cycle of two closed by a shared request.
	t1, t2 := txnNamed(t, l, "T1"), txnNamed(t, l, "T2")
	_, err := t1.Lock(ctx, key(0), opts)
	require.NoError(t, err)
	_, err = t2.Lock(ctx, key(1), opts)
	require.NoError(t, err)
	w1 := txnLockAsync(t1, key(1), opts)
	waitingCount(t, l, 1)
	_, err = t2.Lock(ctx, key(0), recordlock.Options{Shared: true, Timeout: recordlock.MaxTimeout})
	require.ErrorIs(t, err, recordlock.ErrDeadlock)
	var dl *recordlock.DeadlockError
	require.ErrorAs(t, err, &dl)
	require.Len(t, dl.Cycle, 2)
	assert.Equal(t, recordlock.DeadlockWait{Txn: "T2", Key: key(0)}, dl.Cycle[0])
	assert.Equal(t, recordlock.DeadlockWait{Txn: "T1", Key: key(1)}, dl.Cycle[1])
	t2.Rollback()
	require.NoError(t, await(t, w1, "the lock").err)
	t1.Rollback()
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A reader queued behind a writer waits for that writer, which waits for the holders: here the
// writer W waits for S's share, S waits for a key the reader's Txn R holds, and R's shared request
// queues behind W. The key is held shared, so R conflicts with no holder; only its edge to the
// writer ahead of it shows the cycle.
func TestReaderBehindWriterDeadlock(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	opts := recordlock.Options{Timeout: recordlock.MaxTimeout}
	r, s, w := txnNamed(t, l, "R"), txnNamed(t, l, "S"), txnNamed(t, l, "W")
	a, b := []byte("a"), []byte("b")
	_, err := r.Lock(ctx, b, opts)
	require.NoError(t, err)
	_, err = s.Lock(ctx, a, recordlock.Options{Shared: true})
	require.NoError(t, err)
	wWaits := txnLockAsync(w, a, opts)
	waitingCount(t, l, 1)
	sWaits := txnLockAsync(s, b, opts)
	waitingCount(t, l, 2)

	_, err = r.Lock(ctx, a, recordlock.Options{Shared: true, Timeout: recordlock.MaxTimeout})
	require.ErrorIs(t, err, recordlock.ErrDeadlock)
	var dl *recordlock.DeadlockError
	require.ErrorAs(t, err, &dl)
	var names []string
	for _, c := range dl.Cycle {
		names = append(names, c.Txn)
	}
	assert.Equal(t, []string{"R", "W", "S"}, names)

	r.Rollback()
	require.NoError(t, await(t, sWaits, "the lock").err)
	s.Rollback()
	require.NoError(t, await(t, wWaits, "the lock").err)
	w.Rollback()
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// An exclusive request waits for every sharer: a cycle through any one of many sharers is found,
// and only the Txn that closes it fails.
func TestWriterWaitsForEverySharer(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	opts := recordlock.Options{Timeout: recordlock.MaxTimeout}
	a, z := []byte("a"), []byte("z")
	w := l.Begin()
	defer w.Rollback()
	_, err := w.Lock(ctx, z, opts)
	require.NoError(t, err)
	readers := make([]*recordlock.Txn, 5)
	for i := range readers {
		readers[i] = l.Begin()
		defer readers[i].Rollback()
		_, err := readers[i].Lock(ctx, a, recordlock.Options{Shared: true})
		require.NoError(t, err)
	}
	wWaits := txnLockAsync(w, a, opts)
	waitingCount(t, l, 1)

	_, err = readers[3].Lock(ctx, z, opts) // z is held by the writer, which waits for this reader's share
	require.ErrorIs(t, err, recordlock.ErrDeadlock)
	for i, r := range readers {
		if i != 3 {
			r.Rollback()
		}
	}
	assert.True(t, pendingLock(wWaits), "the victim's share still holds the writer off")
	readers[3].Rollback()
	require.NoError(t, await(t, wWaits, "the lock").err)
	w.Rollback()
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// RocksDB's DeadlockStress with shared locks: Txns lock random keys in random order, a quarter of
// them exclusively and the rest shared, and some upgrade a key they read; every failure must be
// ErrDeadlock, after which the Txn rolls back (a missed deadlock would run into the Timeout). The
// invariant, checked by each holder between its grant and its release: a key has one exclusive
// holder or only sharers.
func TestDeadlockStressShared(t *testing.T) {
	db := openDB(t)
	lockers := []*recordlock.Locker{newLocker(t, db), newLocker(t, db)}
	const keys, workers, perWorker = 12, 8, 150
	opts := func(shared bool) recordlock.Options {
		return recordlock.Options{Shared: shared, Timeout: 20 * time.Second}
	}
	var readers, writers [keys]atomic.Int32
	var committed, deadlocks, upgrades, upgradeDeadlocks, grants, violations atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 11))
			l := lockers[w%2]
			for i := range perWorker {
				txn := l.Begin()
				mode := map[int]bool{} // key → held exclusively
				release := func() {
					for k, excl := range mode {
						if excl {
							writers[k].Add(-1)
						} else {
							readers[k].Add(-1)
						}
					}
					txn.Rollback()
				}
				exclusiveTxn := (w*perWorker+i)%4 == 0
				ok := true
				for _, k := range r.Perm(keys)[:2+r.IntN(5)] {
					_, err := txn.Lock(context.Background(), []byte(fmt.Sprint("key", k)), opts(!exclusiveTxn))
					if err != nil {
						if !assert.ErrorIs(t, err, recordlock.ErrDeadlock) {
							violations.Add(1)
						}
						deadlocks.Add(1)
						ok = false
						break
					}
					grants.Add(1)
					if r.IntN(3) == 0 {
						time.Sleep(50 * time.Microsecond) // hold it a while, so that Txns overlap
					}
					if exclusiveTxn {
						mode[k] = true
						if writers[k].Add(1) != 1 || readers[k].Load() != 0 {
							violations.Add(1)
						}
					} else {
						mode[k] = false
						readers[k].Add(1)
						if writers[k].Load() != 0 {
							violations.Add(1)
						}
					}
				}
				if ok && !exclusiveTxn && r.IntN(3) == 0 {
					for k := range mode { // upgrade one key read
						_, err := txn.Lock(context.Background(), []byte(fmt.Sprint("key", k)), opts(false))
						if err != nil {
							if !assert.ErrorIs(t, err, recordlock.ErrDeadlock) {
								violations.Add(1)
							}
							upgradeDeadlocks.Add(1)
							ok = false
							break
						}
						upgrades.Add(1)
						readers[k].Add(-1)
						mode[k] = true
						if writers[k].Add(1) != 1 || readers[k].Load() != 0 {
							violations.Add(1)
						}
						break
					}
				}
				if ok {
					committed.Add(1)
				}
				release()
			}
		})
	}
	wg.Wait()
	t.Logf("%d Txns: %d completed, %d deadlocks on a lock, %d upgrades, %d deadlocks on an upgrade; %d grants checked",
		workers*perWorker, committed.Load(), deadlocks.Load(), upgrades.Load(), upgradeDeadlocks.Load(), grants.Load())
	assert.Zero(t, violations.Load(), "a key had a writer beside another holder, or a failure was not a deadlock")
	assert.Equal(t, int64(workers*perWorker), committed.Load()+deadlocks.Load()+upgradeDeadlocks.Load())
	assert.Positive(t, upgrades.Load())
	assert.Positive(t, deadlocks.Load()+upgradeDeadlocks.Load(), "no deadlock happened: the stress exercised nothing")
	for _, l := range lockers {
		assert.True(t, recordlock.ProbeTableEmpty(l))
	}
}
