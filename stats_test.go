package recordlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// Every counter of Stats moves exactly when its event happens, and Held and Waiting match the
// table at rest, back to zero once everything is released. The clock moves only when told.
func TestStatsCountEachEvent(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	ctx := context.Background()
	want := recordlock.Stats{}
	check := func(what string) {
		t.Helper()
		require.Equal(t, want, l.Stats(), what)
	}
	check("a new table")

	a, err := l.TryLock([]byte("a"), recordlock.Options{})
	require.NoError(t, err)
	want.Acquired, want.Held = 1, 1
	check("an uncontended acquisition")

	waiter := lockAsync(ctx, l, []byte("a"), recordlock.Options{})
	waitQueued(t, l, []byte("a"), 1)
	want.Waiting = 1
	check("a queued Lock")
	clk.Advance(5 * time.Millisecond)
	require.True(t, a.Release())
	a2 := granted(t, waiter, "Lock")
	require.NotNil(t, a2)
	want.Waiting, want.Acquired, want.Contended, want.WaitTime = 0, 2, 1, 5*time.Millisecond
	check("a contended acquisition and its wait")

	timedOut := lockAsync(ctx, l, []byte("a"), recordlock.Options{Timeout: 10 * time.Millisecond})
	waitQueued(t, l, []byte("a"), 1)
	clk.Advance(10 * time.Millisecond)
	require.ErrorIs(t, testutil.Await(t, timedOut, "Lock").err, recordlock.ErrTimeout)
	want.Timeouts = 1
	check("a timeout")

	cctx, cancel := context.WithCancel(ctx)
	canceled := lockAsync(cctx, l, []byte("a"), recordlock.Options{})
	waitQueued(t, l, []byte("a"), 1)
	cancel()
	require.ErrorIs(t, testutil.Await(t, canceled, "Lock").err, context.Canceled)
	want.Canceled = 1
	check("a cancellation")

	t1, t2 := l.Begin(), l.Begin()
	_, err = t1.Lock(ctx, []byte("x"), recordlock.Options{})
	require.NoError(t, err)
	_, err = t2.Lock(ctx, []byte("y"), recordlock.Options{})
	require.NoError(t, err)
	t1Waits := txnLockAsync(t, t1, []byte("y"), recordlock.Options{})
	waitQueued(t, l, []byte("y"), 1)
	want.Acquired, want.Held, want.Waiting = 4, 3, 1
	check("a Txn waiting")
	_, err = t2.Lock(ctx, []byte("x"), recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrDeadlock)
	want.Deadlocks = 1
	check("a deadlock")
	t2.Rollback()
	require.NoError(t, testutil.Await(t, t1Waits, "Lock").err)
	t1.Rollback()
	want.Acquired, want.Contended, want.Waiting, want.Held = 5, 2, 0, 1
	check("the survivor of the deadlock")

	short, err := l.TryLock([]byte("b"), recordlock.Options{Lease: 100 * time.Millisecond})
	require.NoError(t, err)
	short.Done() // watched: its timer ends the lease at the deadline
	clk.Advance(100 * time.Millisecond)
	want.Acquired, want.Lapsed = 6, 1
	check("a lease lapsed with its key held")
	require.ErrorIs(t, short.Fence(func() error { return nil }), recordlock.ErrLeaseExpired)
	want.Fenced = 1
	check("a fenced refusal")

	r, err := l.TryLock([]byte("c"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	joinHook(t, r, clk, time.Minute, func() error { return errors.New("hook failed") })
	r.RevokeLease()
	want.Acquired, want.Revoked, want.HookFailures = 7, 1, 1
	check("a revocation whose hook failed")

	require.True(t, a2.Release())
	want.Held = 0
	check("everything released")
}

// Stats belong to the database: two Lockers of one database see the same figures, two databases
// separate ones.
func TestStatsArePerDatabase(t *testing.T) {
	db, other := openDB(t), openDB(t)
	l1, l2, l3 := newLocker(t, db), newLocker(t, db), newLocker(t, other)
	h, err := l1.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err)
	assert.Equal(t, 1, l2.Stats().Held)
	assert.Equal(t, uint64(1), l2.Stats().Acquired)
	assert.Equal(t, recordlock.Stats{}, l3.Stats())
	require.True(t, h.Release())
	assert.Zero(t, l1.Stats().Held)
}

// Locks lists exactly the keys held, each with what a user needs to find its holder.
func TestLocksListsHolders(t *testing.T) {
	db, cfs := openCFDB(t, "index")
	cf := cfs[0]
	clk, l := manual(t, db)
	ctx := context.Background()
	assert.Empty(t, collectLocks(l))

	plain, err := l.TryLock([]byte("plain"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	held, err := l.TryLock([]byte("held"), recordlock.Options{Hold: true})
	require.NoError(t, err)
	inCF, err := l.TryLockCF(cf, []byte("plain"), recordlock.Options{})
	require.NoError(t, err)
	cluster, err := l.TryLock([]byte("cluster"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	joinHook(t, cluster, clk, time.Minute, func() error { return nil })
	txn := l.Begin()
	defer txn.Rollback()
	_, err = txn.Lock(ctx, []byte("txn"), recordlock.Options{})
	require.NoError(t, err)
	waiter := lockAsync(ctx, l, []byte("plain"), recordlock.Options{})
	waitQueued(t, l, []byte("plain"), 1)
	clk.Advance(300 * time.Millisecond)

	got := map[string]recordlock.LockInfo{}
	for info := range l.Locks() {
		id := fmt.Sprintf("%d/%s", info.ColumnFamilyID, info.Key)
		require.NotContains(t, got, id, "reported twice")
		got[id] = info
	}
	require.Len(t, got, 5)
	p := got["0/plain"]
	assert.Equal(t, 1, p.Waiters)
	assert.Equal(t, 700*time.Millisecond, p.Remaining)
	assert.Equal(t, plain.AcquiredAt(), p.AcquiredAt)
	assert.Equal(t, plain.ExpiresAt(), p.ExpiresAt)
	assert.Equal(t, recordlock.ScopeNode, p.Scope)
	assert.False(t, p.Hold)
	assert.Empty(t, p.Owner)
	assert.True(t, got["0/held"].Hold)
	assert.Equal(t, held.AcquiredAt(), got["0/held"].AcquiredAt)
	assert.Equal(t, cf.ID(), got[fmt.Sprintf("%d/plain", cf.ID())].ColumnFamilyID)
	assert.Equal(t, inCF.ColumnFamilyID(), cf.ID())
	assert.Zero(t, got[fmt.Sprintf("%d/plain", cf.ID())].Waiters, "the other column family's key has no waiter")
	assert.Equal(t, recordlock.ScopeCluster, got["0/cluster"].Scope)
	assert.Contains(t, got, "0/txn")

	// Breaking out stops the visit; mutating a reported key changes nothing.
	n := 0
	for info := range l.Locks() {
		info.Key[0] = 'X'
		n++
		break
	}
	assert.Equal(t, 1, n)
	assert.Len(t, collectLocks(l), 5)
	_, err = l.TryLock([]byte("plain"), recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked, "the table's key is untouched")

	require.True(t, plain.Release())
	require.NoError(t, testutil.Await(t, waiter, "Lock").err)
	clk.Advance(time.Minute)
	txn.Rollback()
	assert.Empty(t, collectLocks(l), "every lease has lapsed or been released")
}

// Locks is safe while other goroutines lock and release, and never reports a key twice in one
// pass.
func TestLocksWhileLockersChurn(t *testing.T) {
	db := openDB(t)
	l := newLocker(t, db)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				h, err := l.Lock(context.Background(), []byte{byte(g), byte(i % 16)}, recordlock.Options{})
				if assert.NoError(t, err) {
					h.Release()
				}
			}
		}()
	}
	for range 200 {
		seen := map[string]bool{}
		for info := range l.Locks() {
			require.False(t, seen[string(info.Key)], "key %q reported twice", info.Key)
			seen[string(info.Key)] = true
		}
	}
	close(stop)
	wg.Wait()
	assert.Empty(t, collectLocks(l))
	assert.Zero(t, l.Stats().Held)
}

func collectLocks(l *recordlock.Locker) []recordlock.LockInfo {
	var out []recordlock.LockInfo
	for info := range l.Locks() {
		out = append(out, info)
	}
	return out
}
