package recordlock_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// named begins a Txn called name on l, rolled back at the end of the test.
func named(t *testing.T, l *recordlock.Locker, name string) *recordlock.Txn {
	t.Helper()
	txn, err := l.BeginTx(recordlock.TxnOptions{Name: name})
	require.NoError(t, err)
	t.Cleanup(txn.Rollback)
	return txn
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
	holder, first, second := named(t, l, "holder"), named(t, l, "first"), named(t, l, "second")
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
	require.NoError(t, result(t, firstWaits).err)
	first.Rollback()
	require.NoError(t, result(t, secondWaits).err)
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
	holder, first, second := named(t, l, "holder"), named(t, l, "first"), named(t, l, "second")
	_, err := holder.Lock(ctx, a, recordlock.Options{})
	require.NoError(t, err)
	_, err = second.Lock(ctx, b, recordlock.Options{})
	require.NoError(t, err)
	firstWaits := txnLockAsync(first, a, recordlock.Options{})
	waitQueued(t, l, a, 1)
	secondWaits := txnLockAsync(second, a, recordlock.Options{})
	waitQueued(t, l, a, 2)

	holder.Rollback()
	require.NoError(t, result(t, firstWaits).err, "first is granted a; second still waits for it")
	_, err = first.Lock(ctx, b, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrDeadlock)
	assert.Equal(t, []string{"first:b", "second:a"}, cycleOf(t, err))
	select {
	case r := <-secondWaits:
		t.Fatalf("second stopped waiting: %v", r.err)
	default:
	}

	first.Rollback()
	require.NoError(t, result(t, secondWaits).err)
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
