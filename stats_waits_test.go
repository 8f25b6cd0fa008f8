package recordlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// Waits lists every queued request with its key, column family, owner and the time it has
// waited, oldest first per key, and nothing once the waits end.
func TestWaitsListsQueuedRequests(t *testing.T) {
	db, cfs := openCFDB(t, "index")
	cf := cfs[0]
	clk, l := manual(t, db)
	ctx := context.Background()
	assert.Empty(t, collectWaits(l))

	plain, err := l.TryLock([]byte("plain"), recordlock.Options{})
	require.NoError(t, err)
	inCF, err := l.TryLockCF(cf, []byte("plain"), recordlock.Options{})
	require.NoError(t, err)
	holder := txnNamed(t, l, "holder")
	_, err = holder.Lock(ctx, []byte("row"), recordlock.Options{})
	require.NoError(t, err)
	assert.Empty(t, collectWaits(l), "holders are not waits")

	first := lockAsync(ctx, l, []byte("plain"), recordlock.Options{})
	waitQueued(t, l, []byte("plain"), 1)
	clk.Advance(time.Second)
	waiter := txnNamed(t, l, "waiter")
	second := txnLockAsync(t, waiter, []byte("plain"), recordlock.Options{})
	waitQueued(t, l, []byte("plain"), 2)
	clk.Advance(time.Second)
	onRow := txnNamed(t, l, "on-row")
	third := txnLockAsync(t, onRow, []byte("row"), recordlock.Options{})
	waitQueued(t, l, []byte("row"), 1)
	inCFWaits := make(chan error, 1)
	go func() {
		h, err := l.LockCF(ctx, cf, []byte("plain"), recordlock.Options{})
		if err == nil {
			h.Release()
		}
		inCFWaits <- err
	}()
	require.Eventually(t, func() bool { return len(collectWaits(l)) == 4 }, 10*time.Second, time.Millisecond)
	clk.Advance(500 * time.Millisecond)

	got := collectWaits(l)
	require.Len(t, got, 4)
	byKey := map[string][]recordlock.WaitInfo{}
	for _, w := range got {
		id := fmt.Sprintf("%d/%s", w.ColumnFamilyID, w.Key)
		byKey[id] = append(byKey[id], w)
		assert.False(t, w.Shared, "every request is exclusive")
		assert.False(t, w.Upgrade)
	}
	require.Len(t, byKey["0/plain"], 2)
	assert.Equal(t, recordlock.WaitInfo{Key: []byte("plain"), Waited: 2500 * time.Millisecond}, byKey["0/plain"][0], "the oldest first")
	assert.Equal(t, recordlock.WaitInfo{Key: []byte("plain"), Owner: "waiter", Waited: 1500 * time.Millisecond}, byKey["0/plain"][1])
	assert.Equal(t, []recordlock.WaitInfo{{Key: []byte("row"), Owner: "on-row", Waited: 500 * time.Millisecond}}, byKey["0/row"])
	cfID := cf.ID()
	require.Len(t, byKey[fmt.Sprintf("%d/plain", cfID)], 1)
	assert.Equal(t, cfID, byKey[fmt.Sprintf("%d/plain", cfID)][0].ColumnFamilyID)

	require.True(t, plain.Release())
	h := granted(t, first, "Lock")
	require.NotNil(t, h)
	require.True(t, h.Release())
	require.NoError(t, testutil.Await(t, second, "Lock").err)
	waiter.Rollback()
	holder.Rollback()
	require.NoError(t, testutil.Await(t, third, "Lock").err)
	onRow.Rollback()
	require.True(t, inCF.Release())
	require.NoError(t, testutil.Await(t, inCFWaits, "LockCF"))
	assert.Empty(t, collectWaits(l))
}

// Waited is measured on the clock of the waiting Locker, not the holder's; both Lockers of the
// database see the wait.
func TestWaitsUseTheWaitersClock(t *testing.T) {
	db := openDB(t)
	holderClock, holder := manual(t, db)
	waiterClock, waiting := manual(t, db)
	h, err := holder.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err)
	c := lockAsync(context.Background(), waiting, []byte("k"), recordlock.Options{})
	waitQueued(t, waiting, []byte("k"), 1)
	holderClock.Advance(time.Second)
	waiterClock.Advance(5 * time.Second)
	for _, l := range []*recordlock.Locker{holder, waiting} {
		got := collectWaits(l)
		require.Len(t, got, 1)
		assert.Equal(t, 5*time.Second, got[0].Waited)
	}
	require.True(t, h.Release())
	got := granted(t, c, "Lock")
	require.NotNil(t, got)
	require.True(t, got.Release())
}

// Each WaitInfo's key is a copy: changing it changes neither the table nor a later listing, and
// breaking out of the loop leaves the table usable.
func TestWaitsKeyIsACopy(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	key := []byte("record")
	h, err := l.TryLock(key, recordlock.Options{})
	require.NoError(t, err)
	c := lockAsync(context.Background(), l, key, recordlock.Options{})
	waitQueued(t, l, key, 1)
	for w := range l.Waits() {
		w.Key[0] = 'X'
		break
	}
	got := collectWaits(l)
	require.Len(t, got, 1)
	assert.Equal(t, "record", string(got[0].Key))
	require.True(t, h.Release())
	next := granted(t, c, "Lock")
	require.NotNil(t, next)
	assert.Equal(t, "record", string(next.Key()))
	require.True(t, next.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// While Txns churn through a few contended keys, every pass of Waits reports each waiting Txn at
// most once (a Txn waits for one key at a time), on a key that is in use, and Locks reports each
// key at most once. Each Txn has a name of its own, so a request reported twice would show.
func TestWaitsWhileLockersChurn(t *testing.T) {
	db := openDB(t)
	l := newLocker(t, db)
	keys := [][]byte{[]byte("k0"), []byte("k1"), []byte("k2")}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var granted atomic.Int64
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				txn, err := l.BeginTx(recordlock.TxnOptions{Name: fmt.Sprintf("txn-%d-%d", g, i)})
				if !assert.NoError(t, err) {
					return
				}
				_, err = txn.Lock(context.Background(), keys[(g+i)%len(keys)], recordlock.Options{Timeout: time.Minute})
				if assert.NoError(t, err) {
					granted.Add(1)
				}
				txn.Rollback()
			}
		})
	}
	listed := 0
	for pass := 0; pass < 500 || listed == 0; pass++ {
		owners := map[string]bool{}
		for w := range l.Waits() {
			require.False(t, owners[w.Owner], "%s reported twice in one pass", w.Owner)
			owners[w.Owner] = true
			require.Contains(t, []string{"k0", "k1", "k2"}, string(w.Key))
			require.GreaterOrEqual(t, w.Waited, time.Duration(0))
			listed++
		}
		held := map[string]bool{}
		for info := range l.Locks() {
			require.False(t, held[string(info.Key)], "key %q reported twice", info.Key)
			held[string(info.Key)] = true
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d waits listed while %d locks were granted", listed, granted.Load())
	assert.Positive(t, listed, "the passes saw requests queued")
	assert.Empty(t, collectWaits(l))
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

func collectWaits(l *recordlock.Locker) []recordlock.WaitInfo {
	var out []recordlock.WaitInfo
	for w := range l.Waits() {
		out = append(out, w)
	}
	return out
}
