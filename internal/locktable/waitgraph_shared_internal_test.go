package locktable

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Deadlock detection over both modes, with ports of RocksDB's SharedLocks, DeadlockCycleShared
// and DeadlockStress cases (utilities/transactions/transaction_test.cc).

// holderRow is what holdersOf lists of one holder.
type holderRow struct {
	key    string
	shared bool
	owner  string
}

// holdersOf lists every holder in l's table, shard by shard.
func holdersOf(l *testLocker) []holderRow {
	var rows []holderRow
	for i := range ShardCount {
		l.tab.VisitHolders(i, func(s Snapshot, _ int) {
			row := holderRow{key: string(s.Key), shared: s.Shared()}
			if s.Owner != nil {
				row.owner = s.Owner.Name()
			}
			rows = append(rows, row)
		})
	}
	return rows
}

// isShared reports whether h holds its key shared.
func isShared(h *Claim) bool { return h.flags()&flagShared != 0 }

// waitingCount blocks until n requests wait in l's table.
func waitingCount(t testing.TB, l *testLocker, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return l.tab.Counts().Waiting == n },
		10*time.Second, 200*time.Microsecond, "waiting for %d waiting requests", n)
}

// timesOut runs lock in a goroutine, waits until it is queued for key, advances clk past timeout
// and checks that lock failed with ErrTimeout.
func timesOut(t *testing.T, clk *ManualClock, l *testLocker, key []byte, timeout time.Duration, lock func() error) {
	t.Helper()
	before := ProbeQueuedWaiters(l, key)
	res := make(chan error, 1)
	go func() { res <- lock() }()
	WaitQueued(t, l, key, before+1)
	clk.Advance(timeout)
	require.ErrorIs(t, testutil.Await(t, res, "the timed-out lock"), ErrTimeout)
}

// The scenarios of RocksDB's SharedLocks: three Txns share a key; two sharers hold off a writer
// until both have let go; a sharer's upgrade waits for the other sharer; a shared request of an
// exclusive holder keeps the exclusive lock; an exclusive holder holds off a reader. A RocksDB
// UndoGetForUpdate is a Release of the hold here, and its 1 µs lock timeout a 1 ms timeout
// advanced on a ManualClock.
func TestSharedLocksScenarios(t *testing.T) {
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, newTestTable(t), clk)
	ctx := context.Background()
	key := []byte("foo")
	const timeout = time.Millisecond
	excl := testOptions{Timeout: timeout}
	shr := testOptions{Timeout: timeout, Shared: true}
	begin := func() [3]*testTxn {
		return [3]*testTxn{{l: l, name: "txn1"}, {l: l, name: "txn2"}, {l: l, name: "txn3"}}
	}
	end := func(txns [3]*testTxn) {
		for _, txn := range txns {
			txn.Rollback()
		}
		require.True(t, ProbeTableEmpty(l))
	}

	// Shared access between Txns: one key, three holders, all shared.
	txns := begin()
	for _, txn := range txns {
		_, err := txn.Lock(ctx, key, shr)
		require.NoError(t, err)
	}
	rows := holdersOf(l)
	require.Len(t, rows, 3)
	owners := map[string]bool{}
	for _, row := range rows {
		assert.Equal(t, string(key), row.key)
		assert.True(t, row.shared)
		owners[row.owner] = true
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
	assert.False(t, isShared(h3))
	end(txns)

	// txn1 and txn2 share the lock and txn2 tries to upgrade it.
	txns = begin()
	h1, err = txns[0].Lock(ctx, key, shr)
	require.NoError(t, err)
	h2, err = txns[1].Lock(ctx, key, shr)
	require.NoError(t, err)
	timesOut(t, clk, l, key, timeout, func() error { _, err := txns[1].Lock(ctx, key, excl); return err })
	assert.True(t, isShared(h2), "the failed upgrade left the share")
	require.True(t, h1.Release())
	up, err := txns[1].Lock(ctx, key, excl)
	require.NoError(t, err)
	assert.Same(t, h2, up)
	assert.False(t, isShared(h2))
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
	assert.False(t, isShared(h1))
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
	assert.True(t, isShared(h2))
	end(txns)
	assert.Equal(t, uint64(6), l.tab.Counts().Timeouts)
}

// RocksDB's DeadlockCycleShared: 31 Txns in a binary tree, Tn holding key n/2 shared, each of the
// 15 inner Txns waiting to take its own key exclusively, held shared by its two children. Each of
// the 16 leaves that then asks for key 0 (held shared by the root) exclusively closes a cycle
// through its ancestors and gets a deadlock naming them; once the leaves roll back, the tree
// unwinds. Then the small case: of two Txns holding one key each exclusively, the one that asks for
// the other's key shared, while the other waits for its key, closes a cycle of two.
func TestDeadlockCycleShared(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	ctx := context.Background()
	opts := testOptions{Timeout: time.Hour}
	name := func(i int) string { return fmt.Sprint("T", i+1) }
	key := func(n int) []byte { return []byte(strconv.Itoa(n)) }

	const n = 31
	txns := make([]*testTxn, n)
	for i := range txns {
		txns[i] = &testTxn{l: l, name: name(i)}
		t.Cleanup(txns[i].Rollback)
		_, err := txns[i].Lock(ctx, key((i+1)/2), testOptions{Shared: true})
		require.NoError(t, err)
	}
	waits := make([]<-chan lockResult, 15)
	for i := range waits {
		waits[i] = txnLockResult(t, txns[i], key(i+1), opts)
	}
	waitingCount(t, l, 15)

	for i := 15; i < n; i++ {
		_, err := txns[i].Lock(ctx, key(0), opts)
		var dl *DeadlockError
		require.ErrorAs(t, err, &dl, "leaf %s", name(i))
		// The cycle runs from the leaf to the root and down its ancestors back to the leaf.
		var path []string
		for j := i; ; j = (j - 1) / 2 {
			path = append(path, name(j))
			if j == 0 {
				break
			}
		}
		require.Len(t, dl.Cycle, len(path), "leaf %s: %v", name(i), cycleOf(t, err))
		assert.Equal(t, name(i), dl.Cycle[0].Owner.Name())
		assert.Equal(t, key(0), dl.Cycle[0].Key)
		got := map[string]bool{}
		for _, w := range dl.Cycle {
			got[w.Owner.Name()] = true
		}
		for _, p := range path {
			assert.True(t, got[p], "leaf %s: %s is on the cycle %v", name(i), p, cycleOf(t, err))
		}
		assert.Zero(t, ProbeQueuedWaiters(l, key(0)), "the refused request queued nothing")
	}
	assert.Equal(t, uint64(16), l.tab.Counts().Deadlocks)
	for i := 15; i < n; i++ {
		txns[i].Rollback()
	}
	for i := 14; i >= 0; i-- { // children before parents
		h := granted(t, waits[i], name(i))
		assert.False(t, isShared(h))
		txns[i].Rollback()
	}
	assert.True(t, ProbeTableEmpty(l))

	// The cycle of two closed by a shared request.
	t1, t2 := &testTxn{l: l, name: "T1"}, &testTxn{l: l, name: "T2"}
	t.Cleanup(t1.Rollback)
	defer t2.Rollback()
	_, err := t1.Lock(ctx, key(0), opts)
	require.NoError(t, err)
	_, err = t2.Lock(ctx, key(1), opts)
	require.NoError(t, err)
	w1 := txnLockResult(t, t1, key(1), opts)
	waitingCount(t, l, 1)
	_, err = t2.Lock(ctx, key(0), testOptions{Shared: true, Timeout: time.Hour})
	assert.Equal(t, []string{"T2:0", "T1:1"}, cycleOf(t, err))
	t2.Rollback()
	granted(t, w1, "T1's wait")
	t1.Rollback()
	assert.True(t, ProbeTableEmpty(l))
}

// A reader queued behind a writer waits for that writer, which waits for the holders: here the
// writer W waits for S's share, S waits for a key the reader's Txn R holds, and R's shared request
// queues behind W. The key is held shared, so R conflicts with no holder; only its edge to the
// writer ahead of it shows the cycle.
func TestReaderBehindWriterDeadlock(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	ctx := context.Background()
	opts := testOptions{Timeout: time.Hour}
	r, s, w := &testTxn{l: l, name: "R"}, &testTxn{l: l, name: "S"}, &testTxn{l: l, name: "W"}
	for _, txn := range []*testTxn{r, s, w} {
		t.Cleanup(txn.Rollback)
	}
	a, b := []byte("a"), []byte("b")
	_, err := r.Lock(ctx, b, opts)
	require.NoError(t, err)
	_, err = s.Lock(ctx, a, testOptions{Shared: true})
	require.NoError(t, err)
	wWaits := txnLockResult(t, w, a, opts)
	waitingCount(t, l, 1)
	sWaits := txnLockResult(t, s, b, opts)
	waitingCount(t, l, 2)

	_, err = r.Lock(closingCtx(t), a, testOptions{Shared: true, Timeout: time.Hour})
	require.ErrorAs(t, err, new(*DeadlockError), "a shared request waits for the nearest exclusive request "+
		"queued ahead of it, and R's wait closes R → W → S → R")
	assert.Equal(t, []string{"R:a", "W:a", "S:b"}, cycleOf(t, err))

	r.Rollback()
	granted(t, sWaits, "S's wait")
	s.Rollback()
	granted(t, wWaits, "W's wait")
	w.Rollback()
	assert.True(t, ProbeTableEmpty(l))
}

// An exclusive request waits for every sharer: a cycle through any one of many sharers is found,
// and only the Txn that closes it fails.
func TestWriterWaitsForEverySharer(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	ctx := context.Background()
	opts := testOptions{Timeout: time.Hour}
	a, z := []byte("a"), []byte("z")
	w := l.Begin()
	t.Cleanup(w.Rollback)
	_, err := w.Lock(ctx, z, opts)
	require.NoError(t, err)
	readers := make([]*testTxn, 5)
	for i := range readers {
		readers[i] = l.Begin()
		defer readers[i].Rollback()
		_, err := readers[i].Lock(ctx, a, testOptions{Shared: true})
		require.NoError(t, err)
	}
	wWaits := txnLockResult(t, w, a, opts)
	waitingCount(t, l, 1)

	_, err = readers[3].Lock(closingCtx(t), z, opts) // z is held by the writer, which waits for this reader's share
	require.True(t, isDeadlock(err), "an exclusive request waits for every sharer, and this reader's wait "+
		"closes reader → writer → reader: %v", err)
	for i, r := range readers {
		if i != 3 {
			r.Rollback()
		}
	}
	assert.True(t, testutil.NotReturned(wWaits), "the victim's share still holds the writer off")
	readers[3].Rollback()
	granted(t, wWaits, "the writer's wait")
	w.Rollback()
	assert.True(t, ProbeTableEmpty(l))
}

// RocksDB's DeadlockStress with shared locks: Txns lock random keys in random order, a quarter of
// them exclusively and the rest shared, and some upgrade a key they read; every failure must be
// a deadlock, after which the Txn rolls back (a missed deadlock would run into the timeout). The
// invariant, checked by each holder between its grant and its release: a key has one exclusive
// holder or only sharers. The Txns run on two tenants of the table, as on two Lockers.
func TestDeadlockStressShared(t *testing.T) {
	tab := newTestTable(t)
	lockers := []*testLocker{newTestLocker(t, tab, System), newTestLocker(t, tab, System)}
	const keys, workers, perWorker = 12, 8, 150
	opts := func(shared bool) testOptions {
		return testOptions{Shared: shared, Timeout: 20 * time.Second}
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
						if !assert.True(t, isDeadlock(err), "%v", err) {
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
							if !assert.True(t, isDeadlock(err), "%v", err) {
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
		assert.True(t, ProbeTableEmpty(l))
	}
}

// An upgrade waits until the Txn's share is the only one: with another sharer left it
// queues, and takes the key once that sharer lets go.
func TestUpgradeWaitsForTheOtherSharers(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	key := []byte("k")
	txn := l.Begin()
	t.Cleanup(txn.Rollback)
	h, err := txn.Lock(context.Background(), key, testOptions{Shared: true})
	require.NoError(t, err)
	other, err := l.TryLock(key, testOptions{Shared: true})
	require.NoError(t, err)
	up := txnLockResult(t, txn, key, testOptions{})
	if !testutil.NotReturned(up) {
		t.Fatal("an upgrade waits until the Txn's share is the only one; it returned with another sharer left")
	}
	assert.True(t, isShared(h), "the handle stays shared while its upgrade waits")
	require.True(t, other.Release())
	assert.Same(t, h, granted(t, up, "the upgrade"), "the upgrade makes the Txn's own handle exclusive")
	assert.False(t, isShared(h))
	txn.Rollback()
	assert.True(t, ProbeTableEmpty(l))
}
