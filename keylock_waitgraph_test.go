package recordlock_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// A cycle of n Txns, each holding one key and waiting for the next one's, is reported at once to
// the Txn whose wait would close it, and only to it; the clock never moves. Once the victim rolls
// back, every other Txn gets its key and commits.
func TestDeadlockCycleReportedToOneTxn(t *testing.T) {
	for _, n := range []int{2, 3, 32} {
		t.Run(fmt.Sprintf("%d txns", n), func(t *testing.T) {
			db := openDB(t)
			_, l := manual(t, db)
			key := func(i int) []byte { return []byte(fmt.Sprintf("k%02d", i%n)) }
			txns := make([]*recordlock.Txn, n)
			for i := range txns {
				txns[i] = l.Begin()
				defer txns[i].Rollback()
				_, err := txns[i].Lock(context.Background(), key(i), recordlock.Options{})
				require.NoError(t, err)
			}
			waits := make([]<-chan lockResult, n-1)
			for i := range n - 1 {
				waits[i] = txnLockAsync(txns[i], key(i+1), recordlock.Options{})
				waitQueued(t, l, key(i+1), 1)
			}
			_, err := txns[n-1].Lock(context.Background(), key(0), recordlock.Options{})
			require.ErrorIs(t, err, recordlock.ErrDeadlock)
			var dl *recordlock.DeadlockError
			require.ErrorAs(t, err, &dl)
			require.Len(t, dl.Cycle, n, "the error names every Txn of the cycle")
			assert.Equal(t, key(0), dl.Cycle[0].Key, "starting with the request that failed")
			assert.Equal(t, 0, recordlock.ProbeQueuedWaiters(l, key(0)), "the failed request queued nothing")
			for i := range n - 1 {
				select {
				case r := <-waits[i]:
					t.Fatalf("txn %d stopped waiting: %v", i, r.err)
				default:
				}
			}

			txns[n-1].Rollback() // the victim lets go of its key: the chain unwinds from its end
			for i := n - 2; i >= 0; i-- {
				r := await(t, waits[i], "Lock")
				require.NoError(t, r.err, "txn %d", i)
				require.NoError(t, txns[i].Put(key(i+1), []byte("v")))
				require.NoError(t, txns[i].Commit())
			}
			assert.True(t, recordlock.ProbeTableEmpty(l))
		})
	}
}

// Two Txns that start waiting for each other at the same instant: exactly one gets ErrDeadlock,
// every round, and the other gets its key once the victim rolls back.
func TestSimultaneousDeadlockHasOneVictim(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	a, b := []byte("a"), []byte("b")
	for round := range 1000 {
		t1, t2 := l.Begin(), l.Begin()
		_, err := t1.Lock(context.Background(), a, recordlock.Options{})
		require.NoError(t, err)
		_, err = t2.Lock(context.Background(), b, recordlock.Options{})
		require.NoError(t, err)

		start := make(chan struct{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, step := range []struct {
			txn *recordlock.Txn
			key []byte
		}{{t1, b}, {t2, a}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = step.txn.Lock(context.Background(), step.key, recordlock.Options{})
				if errs[i] != nil {
					step.txn.Rollback() // the victim lets the survivor through
				}
			}()
		}
		close(start)
		wg.Wait()
		victims := 0
		for _, err := range errs {
			if err != nil {
				require.ErrorIs(t, err, recordlock.ErrDeadlock, "round %d", round)
				victims++
			}
		}
		require.Equal(t, 1, victims, "round %d: exactly one victim", round)
		t1.Rollback()
		t2.Rollback()
	}
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A wait for a key held outside any Txn is not part of the graph: a chain through such a holder
// is never reported, and a true cycle through it is ended by the timeout.
func TestWaitOnNonTxnHolderIsNotADeadlock(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	a, b, c := []byte("a"), []byte("b"), []byte("c")

	t1, t2 := l.Begin(), l.Begin()
	defer t1.Rollback()
	defer t2.Rollback()
	_, err := t1.Lock(context.Background(), a, recordlock.Options{})
	require.NoError(t, err)
	_, err = t2.Lock(context.Background(), c, recordlock.Options{})
	require.NoError(t, err)
	plain, err := l.TryLock(b, recordlock.Options{})
	require.NoError(t, err)

	t1Waits := txnLockAsync(t1, b, recordlock.Options{})
	waitQueued(t, l, b, 1)
	t2Waits := txnLockAsync(t2, a, recordlock.Options{})
	waitQueued(t, l, a, 1)
	// The plain holder now waits for c, held by t2: a cycle the graph does not see.
	plainWaits := lockAsync(context.Background(), l, c, recordlock.Options{Timeout: time.Second})
	waitQueued(t, l, c, 1)
	clk.Advance(time.Second)
	require.ErrorIs(t, await(t, plainWaits, "Lock").err, recordlock.ErrTimeout)

	require.True(t, plain.Release())
	require.NoError(t, await(t, t1Waits, "Lock").err)
	require.NoError(t, t1.Commit())
	require.NoError(t, await(t, t2Waits, "Lock").err)
	require.NoError(t, t2.Commit())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A cycle is reported to the Txn that closes it, not to another Txn queued for one of its keys,
// which gets the key in its turn.
func TestDeadlockSparesOtherWaiters(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	a, b := []byte("a"), []byte("b")
	holder, t1, t2 := l.Begin(), l.Begin(), l.Begin()
	defer holder.Rollback()
	defer t1.Rollback()
	defer t2.Rollback()
	_, err := holder.Lock(context.Background(), a, recordlock.Options{})
	require.NoError(t, err)
	_, err = t1.Lock(context.Background(), b, recordlock.Options{})
	require.NoError(t, err)

	t1Waits := txnLockAsync(t1, a, recordlock.Options{}) // first in line for a
	waitQueued(t, l, a, 1)
	t2Waits := txnLockAsync(t2, a, recordlock.Options{}) // behind t1
	waitQueued(t, l, a, 2)
	// The holder asks for b, held by t1, which waits for a, which the holder holds.
	_, err = holder.Lock(context.Background(), b, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrDeadlock)
	holder.Rollback()
	require.NoError(t, await(t, t1Waits, "Lock").err)
	t1.Rollback()
	r := await(t, t2Waits, "Lock")
	require.NoError(t, r.err)
	assert.False(t, errors.Is(r.err, recordlock.ErrDeadlock))
	t2.Rollback()
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// LockAll is all or nothing on ErrDeadlock too: the keys it took before the deadlocked one are
// released, and the Txn's earlier locks are kept.
func TestLockAllReleasesItsKeysOnDeadlock(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	t1, t2 := l.Begin(), l.Begin()
	defer t1.Rollback()
	defer t2.Rollback()
	_, err := t1.Lock(ctx, []byte("m"), recordlock.Options{})
	require.NoError(t, err)
	pre, err := t2.Lock(ctx, []byte("z"), recordlock.Options{})
	require.NoError(t, err)
	t1Waits := txnLockAsync(t1, []byte("z"), recordlock.Options{})
	waitQueued(t, l, []byte("z"), 1)

	// t2 takes a, then would wait for m, held by t1, which waits for z, held by t2.
	_, err = t2.LockAll(ctx, recordlock.Options{}, []byte("m"), []byte("a"))
	require.ErrorIs(t, err, recordlock.ErrDeadlock)
	h, err := l.TryLock([]byte("a"), recordlock.Options{})
	require.NoError(t, err, "the key LockAll took before the deadlock was released")
	require.True(t, h.Release())
	assert.False(t, pre.IsExpired(), "the Txn's earlier lock is kept")

	t2.Rollback()
	require.NoError(t, await(t, t1Waits, "Lock").err)
	t1.Rollback()
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Transfers that lock their two accounts in from→to order, retrying on ErrDeadlock, all complete
// and conserve the total; every deadlock is reported at once instead of waiting out the 30 s
// Timeout, so no Lock waits anywhere near as long.
func TestTransfersInNaturalOrderRetryOnDeadlock(t *testing.T) {
	db := openDB(t)
	l := newLocker(t, db)
	ctx := context.Background()
	const accounts, workers, perWorker, balance = 4, 8, 200, 1000
	opts := recordlock.Options{Lease: 30 * time.Second, Timeout: 30 * time.Second}
	seed, err := l.BeginTx(recordlock.TxnOptions{AllowUnlockedWrites: true})
	require.NoError(t, err)
	for i := range accounts {
		require.NoError(t, seed.Put(account(i), []byte(fmt.Sprint(balance))))
	}
	require.NoError(t, seed.Commit())

	var mu sync.Mutex
	deadlocks, slowWaits, longest := 0, 0, time.Duration(0)
	lock := func(txn *recordlock.Txn, key []byte) error {
		start := time.Now()
		_, err := txn.Lock(ctx, key, opts)
		d := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		longest = max(longest, d)
		if d > 100*time.Millisecond {
			slowWaits++
		}
		if errors.Is(err, recordlock.ErrDeadlock) {
			deadlocks++
		}
		return err
	}
	transfer := func(from, to []byte) error {
		txn := l.Begin()
		defer txn.Rollback()
		for _, k := range [][]byte{from, to} {
			if err := lock(txn, k); err != nil {
				return err
			}
		}
		var b [2]int
		for i, k := range [][]byte{from, to} {
			v, err := txn.Get(k)
			if err != nil {
				return err
			}
			if _, err := fmt.Sscan(string(v), &b[i]); err != nil {
				return err
			}
		}
		if err := txn.Put(from, []byte(fmt.Sprint(b[0]-1))); err != nil {
			return err
		}
		if err := txn.Put(to, []byte(fmt.Sprint(b[1]+1))); err != nil {
			return err
		}
		return txn.Commit()
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				from := account((w + i) % accounts)
				to := account((w + i + 1 + i%(accounts-1)) % accounts)
				for {
					err := transfer(from, to)
					if err == nil {
						break
					}
					if !assert.ErrorIs(t, err, recordlock.ErrDeadlock) {
						return
					}
				}
			}
		}()
	}
	wg.Wait()

	check := l.Begin()
	defer check.Rollback()
	total := 0
	for i := range accounts {
		v, err := check.Get(account(i))
		require.NoError(t, err)
		var n int
		_, err = fmt.Sscan(string(v), &n)
		require.NoError(t, err)
		total += n
	}
	assert.Equal(t, accounts*balance, total, "the total is conserved")
	t.Logf("%d transfers, %d deadlocks reported, %d waits over 100 ms, longest %v",
		workers*perWorker, deadlocks, slowWaits, longest)
	assert.Less(t, longest, 5*time.Second, "no wait ran towards the 30 s Timeout")
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// cycleOf returns the Txns and keys that err's cycle names, as "txn:key".
func cycleOf(t *testing.T, err error) []string {
	t.Helper()
	var dl *recordlock.DeadlockError
	require.ErrorAs(t, err, &dl)
	var names []string
	for _, w := range dl.Cycle {
		names = append(names, w.Txn+":"+string(w.Key))
	}
	return names
}

// A cycle through a Txn queued behind others is found: the holder of a asks for b, held by the
// second Txn queued for a. The Txns queued ahead of it are not part of the cycle and are spared.
func TestDeadlockThroughWaiterQueuedBehindOthers(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	a, b := []byte("a"), []byte("b")
	holder, first, second := txnNamed(t, l, "holder"), txnNamed(t, l, "first"), txnNamed(t, l, "second")
	_, err := holder.Lock(ctx, a, recordlock.Options{})
	require.NoError(t, err)
	_, err = second.Lock(ctx, b, recordlock.Options{})
	require.NoError(t, err)
	firstWaits := txnLockAsync(first, a, recordlock.Options{})
	waitQueued(t, l, a, 1)
	secondWaits := txnLockAsync(second, a, recordlock.Options{})
	waitQueued(t, l, a, 2)

	_, err = holder.Lock(ctx, b, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrDeadlock)
	assert.Equal(t, []string{"holder:b", "second:a"}, cycleOf(t, err))
	assert.Equal(t, 0, recordlock.ProbeQueuedWaiters(l, b), "the failed request queued nothing")

	holder.Rollback()
	require.NoError(t, await(t, firstWaits, "Lock").err)
	first.Rollback()
	require.NoError(t, await(t, secondWaits, "Lock").err)
	second.Rollback()
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A Txn granted a key gains, at that moment, an edge from every Txn still queued for it; a cycle
// through that edge is found when the granted Txn next waits. Here second, queued behind first
// for a, holds b; first gets a, then asks for b.
func TestDeadlockThroughKeyGrantedToWaiter(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	a, b := []byte("a"), []byte("b")
	holder, first, second := txnNamed(t, l, "holder"), txnNamed(t, l, "first"), txnNamed(t, l, "second")
	_, err := holder.Lock(ctx, a, recordlock.Options{})
	require.NoError(t, err)
	_, err = second.Lock(ctx, b, recordlock.Options{})
	require.NoError(t, err)
	firstWaits := txnLockAsync(first, a, recordlock.Options{})
	waitQueued(t, l, a, 1)
	secondWaits := txnLockAsync(second, a, recordlock.Options{})
	waitQueued(t, l, a, 2)

	holder.Rollback()
	require.NoError(t, await(t, firstWaits, "Lock").err, "first is granted a; second still waits for it")
	_, err = first.Lock(ctx, b, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrDeadlock)
	assert.Equal(t, []string{"first:b", "second:a"}, cycleOf(t, err))
	select {
	case r := <-secondWaits:
		t.Fatalf("second stopped waiting: %v", r.err)
	default:
	}

	first.Rollback()
	require.NoError(t, await(t, secondWaits, "Lock").err)
	second.Rollback()
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Every Txn locks every key, in an order of its own, and increments each key's counter; a Txn
// that gets ErrDeadlock rolls back and retries. No Lock has a timeout to fall back on (its ctx,
// 20 s, is a watchdog: reaching it is an undetected deadlock), so every cycle must be found. The
// invariant: every Txn commits, no Lock runs into the watchdog, and no increment is lost.
func TestDeadlockStressEveryKeyInRandomOrder(t *testing.T) {
	const workers, txnsPerWorker, keys = 8, 40, 6
	db := openDB(t)
	l := newLocker(t, db)
	key := func(i int) []byte { return []byte(fmt.Sprintf("k%d", i)) }
	opts := recordlock.Options{Lease: time.Minute, Timeout: 5 * time.Minute}

	var mu sync.Mutex
	deadlocks := 0
	attempt := func(r *rand.Rand) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		txn := l.Begin()
		defer txn.Rollback()
		for _, i := range r.Perm(keys) {
			if _, err := txn.Lock(ctx, key(i), opts); err != nil {
				return err
			}
			v, err := txn.Get(key(i))
			if err != nil {
				return err
			}
			var n uint64
			if len(v) == 8 {
				n = binary.BigEndian.Uint64(v)
			}
			if err := txn.Put(key(i), binary.BigEndian.AppendUint64(nil, n+1)); err != nil {
				return err
			}
		}
		return txn.Commit()
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 18))
			for range txnsPerWorker {
				for {
					err := attempt(r)
					if err == nil {
						break
					}
					if !assert.ErrorIs(t, err, recordlock.ErrDeadlock, "only a detected deadlock ends a wait") {
						return
					}
					mu.Lock()
					deadlocks++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()

	check := l.Begin()
	defer check.Rollback()
	for i := range keys {
		v, err := check.Get(key(i))
		require.NoError(t, err)
		require.Len(t, v, 8)
		assert.Equal(t, uint64(workers*txnsPerWorker), binary.BigEndian.Uint64(v), "key %d: no increment lost", i)
	}
	t.Logf("%d Txns committed, %d deadlocks reported", workers*txnsPerWorker, deadlocks)
	assert.Positive(t, deadlocks, "random orders deadlock")
	assert.True(t, recordlock.ProbeTableEmpty(l))
}
