package locktable

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// isDeadlock reports whether err is a deadlock the table found.
func isDeadlock(err error) bool {
	var dl *DeadlockError
	return errors.As(err, &dl)
}

// A cycle of n Txns, each holding one key and waiting for the next one's, is reported at once to
// the Txn whose wait would close it, and only to it; the clock never moves. Once the victim rolls
// back, every other Txn gets its key.
func TestDeadlockCycleReportedToOneTxn(t *testing.T) {
	for _, n := range []int{2, 3, 32} {
		t.Run(fmt.Sprintf("%d txns", n), func(t *testing.T) {
			l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
			key := func(i int) []byte { return fmt.Appendf(nil, "k%02d", i%n) }
			txns := make([]*testTxn, n)
			for i := range txns {
				txns[i] = l.Begin()
				t.Cleanup(txns[i].Rollback)
				_, err := txns[i].Lock(context.Background(), key(i), testOptions{})
				require.NoError(t, err)
			}
			waits := make([]<-chan lockResult, n-1)
			for i := range n - 1 {
				waits[i] = txnLockResult(t, txns[i], key(i+1), testOptions{})
				WaitQueued(t, l, key(i+1), 1)
			}
			_, err := txns[n-1].Lock(closingCtx(t), key(0), testOptions{})
			var dl *DeadlockError
			require.ErrorAs(t, err, &dl, "the wait that closes a cycle of %d Txns fails with ErrDeadlock", n)
			require.Len(t, dl.Cycle, n, "the error names every Txn of the cycle")
			assert.Equal(t, key(0), dl.Cycle[0].Key, "starting with the request that failed")
			assert.Equal(t, 0, ProbeQueuedWaiters(l, key(0)), "the failed request queued nothing")
			for i := range n - 1 {
				select {
				case r := <-waits[i]:
					t.Fatalf("txn %d stopped waiting: %v", i, r.err)
				default:
				}
			}

			txns[n-1].Rollback() // the victim lets go of its key: the chain unwinds from its end
			for i := n - 2; i >= 0; i-- {
				granted(t, waits[i], fmt.Sprintf("txn %d", i))
				txns[i].Rollback()
			}
			assert.True(t, ProbeTableEmpty(l), "the victim queues nothing, and the other Txns of the cycle are served")
		})
	}
}

// closingCtx bounds the wait of a request that closes a cycle: with deadlock detection broken it
// would sleep until the test's own deadline, and fails by name at this one instead.
func closingCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Two Txns that start waiting for each other at the same instant: exactly one gets the deadlock,
// every round, and the other gets its key once the victim rolls back.
func TestSimultaneousDeadlockHasOneVictim(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	a, b := []byte("a"), []byte("b")
	for round := range 1000 {
		t1, t2 := l.Begin(), l.Begin()
		_, err := t1.Lock(context.Background(), a, testOptions{})
		require.NoError(t, err)
		_, err = t2.Lock(context.Background(), b, testOptions{})
		require.NoError(t, err)

		start := make(chan struct{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, step := range []struct {
			txn *testTxn
			key []byte
		}{{t1, b}, {t2, a}} {
			wg.Go(func() {
				<-start
				_, errs[i] = step.txn.Lock(context.Background(), step.key, testOptions{})
				if errs[i] != nil {
					step.txn.Rollback() // the victim lets the survivor through
				}
			})
		}
		close(start)
		wg.Wait()
		victims := 0
		for _, err := range errs {
			if err != nil {
				require.True(t, isDeadlock(err), "round %d: %v", round, err)
				victims++
			}
		}
		require.Equal(t, 1, victims, "round %d: exactly one victim", round)
		t1.Rollback()
		t2.Rollback()
	}
	assert.True(t, ProbeTableEmpty(l))
}

// A wait for a key held outside any Txn is not part of the graph: a chain through such a holder
// is never reported, and a true cycle through it is ended by the timeout.
func TestWaitOnNonTxnHolderIsNotADeadlock(t *testing.T) {
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, newTestTable(t), clk)
	a, b, c := []byte("a"), []byte("b"), []byte("c")

	t1, t2 := l.Begin(), l.Begin()
	t.Cleanup(t1.Rollback)
	t.Cleanup(t2.Rollback)
	_, err := t1.Lock(context.Background(), a, testOptions{})
	require.NoError(t, err)
	_, err = t2.Lock(context.Background(), c, testOptions{})
	require.NoError(t, err)
	plain, err := l.TryLock(b, testOptions{})
	require.NoError(t, err)

	t1Waits := txnLockResult(t, t1, b, testOptions{})
	WaitQueued(t, l, b, 1)
	t2Waits := txnLockResult(t, t2, a, testOptions{})
	WaitQueued(t, l, a, 1)
	// The plain holder now waits for c, held by t2: a cycle the graph does not see.
	plainWaits := lockAsync(context.Background(), l, c, testOptions{Timeout: time.Second})
	WaitQueued(t, l, c, 1)
	clk.Advance(time.Second)
	require.ErrorIs(t, testutil.Await(t, plainWaits, "the plain wait").err, ErrTimeout)

	require.True(t, plain.Release())
	granted(t, t1Waits, "t1's wait")
	t1.Rollback()
	granted(t, t2Waits, "t2's wait")
	t2.Rollback()
	assert.True(t, ProbeTableEmpty(l))
}

// A cycle is reported to the Txn that closes it, not to another Txn queued for one of its keys,
// which gets the key in its turn.
func TestDeadlockSparesOtherWaiters(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	a, b := []byte("a"), []byte("b")
	holder, t1, t2 := l.Begin(), l.Begin(), l.Begin()
	defer holder.Rollback()
	t.Cleanup(t1.Rollback)
	t.Cleanup(t2.Rollback)
	_, err := holder.Lock(context.Background(), a, testOptions{})
	require.NoError(t, err)
	_, err = t1.Lock(context.Background(), b, testOptions{})
	require.NoError(t, err)

	t1Waits := txnLockResult(t, t1, a, testOptions{}) // first in line for a
	WaitQueued(t, l, a, 1)
	t2Waits := txnLockResult(t, t2, a, testOptions{}) // behind t1
	WaitQueued(t, l, a, 2)
	// The holder asks for b, held by t1, which waits for a, which the holder holds.
	_, err = holder.Lock(context.Background(), b, testOptions{})
	require.True(t, isDeadlock(err), "%v", err)
	holder.Rollback()
	granted(t, t1Waits, "t1's wait")
	t1.Rollback()
	granted(t, t2Waits, "t2's wait, spared")
	t2.Rollback()
	assert.True(t, ProbeTableEmpty(l))
}

// twoQueuedForHeldKey is the setup of the tests below: holder holds a, second holds b, and first
// and then second wait for a. The Txns are rolled back when the test ends.
type twoQueuedForHeldKey struct {
	l                       *testLocker
	holder, first, second   *testTxn
	firstWaits, secondWaits <-chan lockResult
}

func newTwoQueuedForHeldKey(t *testing.T) twoQueuedForHeldKey {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	ctx := context.Background()
	a, b := []byte("a"), []byte("b")
	x := twoQueuedForHeldKey{l: l, holder: &testTxn{l: l, name: "holder"}, first: &testTxn{l: l, name: "first"}, second: &testTxn{l: l, name: "second"}}
	t.Cleanup(x.holder.Rollback)
	t.Cleanup(x.first.Rollback)
	t.Cleanup(x.second.Rollback)
	_, err := x.holder.Lock(ctx, a, testOptions{})
	require.NoError(t, err)
	_, err = x.second.Lock(ctx, b, testOptions{})
	require.NoError(t, err)
	x.firstWaits = txnLockResult(t, x.first, a, testOptions{})
	WaitQueued(t, l, a, 1)
	x.secondWaits = txnLockResult(t, x.second, a, testOptions{})
	WaitQueued(t, l, a, 2)
	return x
}

// A cycle through a Txn queued behind others is found: the holder of a asks for b, held by the
// second Txn queued for a. The Txns queued ahead of it are not part of the cycle and are spared.
func TestDeadlockThroughWaiterQueuedBehindOthers(t *testing.T) {
	x := newTwoQueuedForHeldKey(t)
	l, ctx, b, holder, first, second := x.l, context.Background(), []byte("b"), x.holder, x.first, x.second
	firstWaits, secondWaits := x.firstWaits, x.secondWaits
	var err error

	_, err = holder.Lock(ctx, b, testOptions{})
	assert.Equal(t, []string{"holder:b", "second:a"}, cycleOf(t, err))
	assert.Equal(t, 0, ProbeQueuedWaiters(l, b), "the failed request queued nothing")

	holder.Rollback()
	granted(t, firstWaits, "first's wait")
	first.Rollback()
	granted(t, secondWaits, "second's wait")
	second.Rollback()
	assert.True(t, ProbeTableEmpty(l))
}

// A Txn granted a key gains, at that moment, an edge from every Txn still queued for it; a cycle
// through that edge is found when the granted Txn next waits. Here second, queued behind first
// for a, holds b; first gets a, then asks for b.
func TestDeadlockThroughKeyGrantedToWaiter(t *testing.T) {
	x := newTwoQueuedForHeldKey(t)
	l, ctx, b, holder, first, second := x.l, context.Background(), []byte("b"), x.holder, x.first, x.second
	firstWaits, secondWaits := x.firstWaits, x.secondWaits
	var err error

	holder.Rollback()
	granted(t, firstWaits, "first is granted a; second still waits for it")
	_, err = first.Lock(ctx, b, testOptions{})
	assert.Equal(t, []string{"first:b", "second:a"}, cycleOf(t, err))
	select {
	case r := <-secondWaits:
		t.Fatalf("second stopped waiting: %v", r.err)
	default:
	}

	first.Rollback()
	granted(t, secondWaits, "second's wait")
	second.Rollback()
	assert.True(t, ProbeTableEmpty(l))
}

// Transfers that lock their two accounts in from→to order, retrying on a deadlock, all complete
// and conserve the total; every deadlock is reported at once instead of waiting out the 30 s
// timeout, so no lock waits anywhere near as long. The balances are plain memory guarded only by
// the locks, so the race detector checks the exclusion too.
func TestTransfersInNaturalOrderRetryOnDeadlock(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), System)
	const accounts, workers, perWorker, balance = 4, 8, 200, 1000
	opts := testOptions{Lease: 30 * time.Second, Timeout: 30 * time.Second}
	account := func(i int) []byte { return fmt.Appendf(nil, "account/%d", i) }
	balances := make([]int, accounts)
	for i := range balances {
		balances[i] = balance
	}

	var mu sync.Mutex
	deadlocks, slowWaits, longest := 0, 0, time.Duration(0)
	lock := func(txn *testTxn, key []byte) error {
		start := time.Now()
		_, err := txn.Lock(context.Background(), key, opts)
		d := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		longest = max(longest, d)
		if d > 100*time.Millisecond {
			slowWaits++
		}
		if isDeadlock(err) {
			deadlocks++
		}
		return err
	}
	transfer := func(from, to int) error {
		txn := l.Begin()
		defer txn.Rollback()
		for _, i := range []int{from, to} {
			if err := lock(txn, account(i)); err != nil {
				return err
			}
		}
		balances[from]--
		balances[to]++
		return nil
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				from := (w + i) % accounts
				to := (w + i + 1 + i%(accounts-1)) % accounts
				for {
					err := transfer(from, to)
					if err == nil {
						break
					}
					if !assert.True(t, isDeadlock(err), "%v", err) {
						return
					}
				}
			}
		})
	}
	wg.Wait()

	total := 0
	for _, b := range balances {
		total += b
	}
	assert.Equal(t, accounts*balance, total, "the total is conserved")
	t.Logf("%d transfers, %d deadlocks reported, %d waits over 100 ms, longest %v",
		workers*perWorker, deadlocks, slowWaits, longest)
	assert.Less(t, longest, 5*time.Second, "no wait ran towards the 30 s timeout")
	assert.True(t, ProbeTableEmpty(l))
}

// Every Txn locks every key, in an order of its own, and increments each key's counter; a Txn
// that gets a deadlock rolls back and retries. No lock has a timeout to fall back on (its ctx,
// 20 s, is a watchdog: reaching it is an undetected deadlock), so every cycle must be found. The
// invariant: every Txn finishes, no lock runs into the watchdog, and no increment is lost. The
// counters are plain memory guarded only by the locks, and a Txn applies its increments only once
// it holds every key, as a commit would.
func TestDeadlockStressEveryKeyInRandomOrder(t *testing.T) {
	const workers, txnsPerWorker, keys = 8, 40, 6
	l := newTestLocker(t, newTestTable(t), System)
	key := func(i int) []byte { return fmt.Appendf(nil, "k%d", i) }
	opts := testOptions{Lease: time.Minute, Timeout: 5 * time.Minute}
	counters := make([]uint64, keys)

	var mu sync.Mutex
	deadlocks := 0
	attempt := func(r *rand.Rand) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		txn := l.Begin()
		defer txn.Rollback()
		order := r.Perm(keys)
		for _, i := range order {
			if _, err := txn.Lock(ctx, key(i), opts); err != nil {
				return err
			}
			// Let the other workers run while this one holds what it took: each Txn is otherwise
			// over within one time slice, and the workers, run one after another, never meet.
			runtime.Gosched()
		}
		for _, i := range order {
			counters[i]++
		}
		return nil
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			<-start
			r := rand.New(rand.NewPCG(uint64(w), 18))
			for range txnsPerWorker {
				for {
					err := attempt(r)
					if err == nil {
						break
					}
					if !assert.True(t, isDeadlock(err), "only a detected deadlock ends a wait: %v", err) {
						return
					}
					mu.Lock()
					deadlocks++
					mu.Unlock()
				}
			}
		})
	}
	close(start)
	wg.Wait()

	for i, n := range counters {
		assert.Equal(t, uint64(workers*txnsPerWorker), n, "key %d: no increment lost", i)
	}
	t.Logf("%d Txns finished, %d deadlocks reported", workers*txnsPerWorker, deadlocks)
	assert.Positive(t, deadlocks, "random orders deadlock")
	assert.True(t, ProbeTableEmpty(l))
}
