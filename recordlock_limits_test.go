package recordlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// WithMaxLocks: what a Locker keeps in its database's table, the locks it holds and the requests
// it has queued, is at most n; a lock that would exceed it fails at once and changes nothing.

// bounded returns a ManualClock, a Locker on a fresh database kept to n locks and requests, and
// another Locker of the database, unbounded, that contends with it.
func bounded(t *testing.T, n int) (clk *recordlock.ManualClock, l, other *recordlock.Locker) {
	t.Helper()
	db := openDB(t)
	clk, l = manual(t, db, recordlock.WithMaxLocks(n))
	return clk, l, newLocker(t, db, recordlock.WithClock(clk))
}

// requireTooMany requires that err is the refusal of a Locker kept to n locks.
func requireTooMany(t *testing.T, err error, n int) {
	t.Helper()
	require.ErrorIs(t, err, recordlock.ErrTooManyLocks)
	require.EqualError(t, err, fmt.Sprintf("recordlock: too many locks: this Locker keeps at most %d locks and requests", n))
}

// heldKeys lists what is held in l's database, one entry per handle ("start..end" for a range),
// sorted.
func heldKeys(l *recordlock.Locker) []string {
	var out []string
	for info := range l.Locks() {
		k := fmt.Sprintf("%d/%s", info.ColumnFamilyID, info.Key)
		if info.IsRange {
			k += ".." + string(info.RangeEnd)
		}
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Every kind of lock call is refused at the bound: at once, even for a busy key it would wait
// for, with no handle, and with nothing locked, queued or granted meanwhile.
func TestMaxLocksRefusesEveryKindOfLock(t *testing.T) {
	db, cfs := openCFDB(t, "cf")
	clk := recordlock.NewManualClock(epoch)
	l := newLocker(t, db, recordlock.WithClock(clk), recordlock.WithMaxLocks(2))
	other := newLocker(t, db, recordlock.WithClock(clk))
	ctx := context.Background()
	cf := cfs[0]

	a, err := l.Lock(ctx, []byte("a"), node)
	require.NoError(t, err)
	txn := l.Begin()
	t.Cleanup(txn.Rollback)
	_, err = txn.Lock(ctx, []byte("b"), node)
	require.NoError(t, err)
	_, err = other.Lock(ctx, []byte("busy"), node) // a request of l for it would queue
	require.NoError(t, err)
	held, before := heldKeys(l), l.Stats()

	k, busy := []byte("k"), []byte("busy")
	calls := []struct {
		name string
		call func(ctx context.Context) (any, error)
	}{
		{"Lock", func(ctx context.Context) (any, error) { return l.Lock(ctx, k, node) }},
		{"Lock of a busy key", func(ctx context.Context) (any, error) { return l.Lock(ctx, busy, wait) }},
		{"shared Lock", func(ctx context.Context) (any, error) { return l.Lock(ctx, k, shared) }},
		{"TryLock", func(context.Context) (any, error) { return l.TryLock(k, node) }},
		{"LockCF", func(ctx context.Context) (any, error) { return l.LockCF(ctx, cf, k, node) }},
		{"TryLockCF", func(context.Context) (any, error) { return l.TryLockCF(cf, k, node) }},
		{"LockRange", func(ctx context.Context) (any, error) { return l.LockRange(ctx, rng("m", "p"), node) }},
		{"TryLockRange", func(context.Context) (any, error) { return l.TryLockRange(rng("m", "p"), node) }},
		{"LockRangeCF", func(ctx context.Context) (any, error) { return l.LockRangeCF(ctx, cf, rng("m", "p"), node) }},
		{"Txn.Lock", func(ctx context.Context) (any, error) { return txn.Lock(ctx, k, node) }},
		{"Txn.Lock of a busy key", func(ctx context.Context) (any, error) { return txn.Lock(ctx, busy, wait) }},
		{"Txn.LockCF", func(ctx context.Context) (any, error) { return txn.LockCF(ctx, cf, k, node) }},
		{"Txn.LockRange", func(ctx context.Context) (any, error) { return txn.LockRange(ctx, rng("m", "p"), node) }},
		{"Txn.LockAll", func(ctx context.Context) (any, error) { return txn.LockAll(ctx, wait, k, busy) }},
		{"Txn.LockAllCF", func(ctx context.Context) (any, error) { return txn.LockAllCF(ctx, cf, node, k) }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			type result struct {
				got any
				err error
			}
			done := make(chan result, 1)
			// Under testutil.Go: a call that queued is cancelled and waited for before the next
			// subtest uses the Txn.
			testutil.Go(t, ctx, func(ctx context.Context) {
				got, err := c.call(ctx)
				done <- result{got, err}
			})
			r := testutil.Await(t, done, c.name) // a call that queued would wait here: no clock moves
			requireTooMany(t, r.err, 2)
			assert.Nil(t, r.got)
			assert.Equal(t, held, heldKeys(l))
			s := l.Stats()
			assert.Equal(t, before.Held, s.Held)
			assert.Equal(t, before.Acquired, s.Acquired, "nothing was granted and given back")
			assert.Zero(t, s.Waiting)
		})
	}
	require.ErrorIs(t, txn.Put(k, []byte("v")), recordlock.ErrNotLocked, "the Txn gained no lock")

	// The refusals took no room: one release makes room for exactly one lock.
	require.True(t, a.Release())
	h, err := l.TryLock(k, node)
	require.NoError(t, err)
	_, err = l.TryLock([]byte("k2"), node)
	requireTooMany(t, err, 2)
	require.True(t, h.Release())
}

// LockAll takes all of the keys it does not hold, or none: the ones it needs must fit before it
// takes any. Keys the Txn holds, and a key given twice, take no more room.
func TestMaxLocksLockAllTakesAllOrNone(t *testing.T) {
	_, l, other := bounded(t, 4)
	ctx := context.Background()
	txn := l.Begin()
	t.Cleanup(txn.Rollback)
	a, err := txn.Lock(ctx, []byte("a"), node)
	require.NoError(t, err)
	_, err = l.Lock(ctx, []byte("z"), node)
	require.NoError(t, err)
	expires, held, before := a.ExpiresAt(), heldKeys(l), l.Stats()

	keys := [][]byte{[]byte("d"), []byte("a"), []byte("b"), []byte("c"), []byte("b")}
	hs, err := txn.LockAll(ctx, recordlock.Options{Scope: recordlock.ScopeNode, Hold: true}, keys...)
	requireTooMany(t, err, 4)
	assert.Nil(t, hs)
	assert.Equal(t, held, heldKeys(l))
	assert.Equal(t, before.Acquired, l.Stats().Acquired, "no key was taken, even for a moment")
	assert.False(t, a.Hold(), "the Txn's lock was not made Hold")
	assert.Equal(t, expires, a.ExpiresAt())
	for _, k := range []string{"b", "c", "d"} {
		requireFree(t, other, k)
	}

	// b and c need two rooms: they fit, and the held a comes back as it was.
	hs, err = txn.LockAll(ctx, node, []byte("b"), []byte("a"), []byte("c"), []byte("b"))
	require.NoError(t, err)
	assert.Same(t, a, hs[1])
	assert.Same(t, hs[0], hs[3])
	_, err = l.TryLock([]byte("e"), node)
	requireTooMany(t, err, 4)
}

// A LockAll that fails after it reserved its rooms gives back those it had not used: here it
// waits for its first key, with the rooms of the two after it reserved, and is cancelled.
func TestMaxLocksLockAllGivesBackItsRooms(t *testing.T) {
	_, l, other := bounded(t, 3)
	_, err := other.Lock(context.Background(), []byte("a"), node)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	txn := l.Begin()
	t.Cleanup(txn.Rollback)
	res := lockAllAsync(t, ctx, txn, wait, []byte("a"), []byte("b"), []byte("c"))
	waitingCount(t, l, 1)
	_, err = l.TryLock([]byte("x"), node)
	requireTooMany(t, err, 3) // a's request and the rooms of b and c

	cancel()
	r := testutil.Await(t, res, "the cancelled LockAll")
	require.ErrorIs(t, r.err, context.Canceled)
	for _, k := range []string{"x", "y", "z"} {
		_, err := l.TryLock([]byte(k), node)
		require.NoError(t, err, k)
	}
	_, err = l.TryLock([]byte("w"), node)
	requireTooMany(t, err, 3)
}

// A Txn's lock of a record it holds, re-entrant or inside one of its ranges, takes no room, nor
// does an upgrade to exclusive or to Hold: at a bound of 1, all of them succeed.
func TestMaxLocksReentrantAndUpgradeTakeNoRoom(t *testing.T) {
	ctx := context.Background()
	t.Run("key", func(t *testing.T) {
		_, l, _ := bounded(t, 1)
		txn := l.Begin()
		t.Cleanup(txn.Rollback)
		h, err := txn.Lock(ctx, []byte("a"), shared)
		require.NoError(t, err)
		for _, opts := range []recordlock.Options{shared, node, {Scope: recordlock.ScopeNode, Hold: true}} {
			again, err := txn.Lock(ctx, []byte("a"), opts)
			require.NoError(t, err)
			assert.Same(t, h, again)
		}
		assert.False(t, h.Shared(), "upgraded to exclusive")
		assert.True(t, h.Hold(), "upgraded to Hold")
		hs, err := txn.LockAll(ctx, node, []byte("a"), []byte("a"))
		require.NoError(t, err)
		assert.Same(t, h, hs[0])
		_, err = l.TryLock([]byte("b"), node)
		requireTooMany(t, err, 1)
		assert.Equal(t, 1, l.Stats().Held)
		require.True(t, h.Release())
	})
	t.Run("inside a range", func(t *testing.T) {
		_, l, _ := bounded(t, 1)
		txn := l.Begin()
		t.Cleanup(txn.Rollback)
		r, err := txn.LockRange(ctx, rng("m", "p"), node)
		require.NoError(t, err)
		in, err := txn.Lock(ctx, []byte("n"), recordlock.Options{Scope: recordlock.ScopeNode, Hold: true})
		require.NoError(t, err)
		assert.Same(t, r, in)
		hs, err := txn.LockAll(ctx, node, []byte("n"), []byte("o"))
		require.NoError(t, err)
		assert.Equal(t, []*recordlock.Handle{r, r}, hs)
		_, err = txn.Lock(ctx, []byte("q"), node)
		requireTooMany(t, err, 1)
		require.True(t, r.Release())
	})
}

// A lock ended by Release, RevokeLease, Commit or Rollback makes room at once, and only once: a
// second ending of the same handle makes none.
func TestMaxLocksEndedLockMakesRoom(t *testing.T) {
	ctx := context.Background()
	ends := map[string]func(t *testing.T, h *recordlock.Handle, txn *recordlock.Txn){
		"Release":     func(t *testing.T, h *recordlock.Handle, _ *recordlock.Txn) { require.True(t, h.Release()) },
		"RevokeLease": func(_ *testing.T, h *recordlock.Handle, _ *recordlock.Txn) { h.RevokeLease() },
		"Commit": func(t *testing.T, _ *recordlock.Handle, txn *recordlock.Txn) {
			require.NoError(t, txn.Put([]byte("a"), []byte("1")))
			require.NoError(t, txn.Commit())
		},
		"Rollback": func(_ *testing.T, _ *recordlock.Handle, txn *recordlock.Txn) { txn.Rollback() },
	}
	for name, end := range ends {
		t.Run(name, func(t *testing.T) {
			_, l, _ := bounded(t, 1)
			txn := l.Begin()
			t.Cleanup(txn.Rollback)
			h, err := txn.Lock(ctx, []byte("a"), node)
			require.NoError(t, err)
			_, err = l.TryLock([]byte("b"), node)
			requireTooMany(t, err, 1)

			end(t, h, txn)
			b, err := l.TryLock([]byte("b"), node)
			require.NoError(t, err)
			assert.False(t, h.Release())
			h.RevokeLease()
			txn.Rollback()
			_, err = l.TryLock([]byte("c"), node)
			requireTooMany(t, err, 1)
			require.True(t, b.Release())
		})
	}
}

// A lease that lapsed makes room at once, though nobody looked at its handle or key and no timer
// ran (the clock's timers never fire): the next lock of the Locker finds it. Releasing the handle
// afterwards makes no second room.
func TestMaxLocksLapsedLockMakesRoom(t *testing.T) {
	ctx := context.Background()
	short := recordlock.Options{Scope: recordlock.ScopeNode, Lease: time.Second}
	takes := map[string]func(l *recordlock.Locker) (*recordlock.Handle, error){
		"key": func(l *recordlock.Locker) (*recordlock.Handle, error) { return l.Lock(ctx, []byte("a"), short) },
		"shared key": func(l *recordlock.Locker) (*recordlock.Handle, error) {
			return l.Lock(ctx, []byte("a"), recordlock.Options{Shared: true, Lease: time.Second})
		},
		"range": func(l *recordlock.Locker) (*recordlock.Handle, error) { return l.LockRange(ctx, rng("a", "c"), short) },
	}
	for name, take := range takes {
		t.Run(name, func(t *testing.T) {
			clk := frozenTimers{recordlock.NewManualClock(epoch)}
			l := newLocker(t, openDB(t), recordlock.WithClock(clk), recordlock.WithMaxLocks(1))
			h, err := take(l)
			require.NoError(t, err)
			_, err = l.TryLock([]byte("x"), node)
			requireTooMany(t, err, 1)

			clk.Advance(2 * time.Second)
			x, err := l.TryLock([]byte("x"), node)
			require.NoError(t, err, "the lapsed lease made room")
			assert.True(t, h.IsLeaseExpired())
			assert.False(t, h.Release())
			h.RevokeLease()
			_, err = l.TryLock([]byte("y"), node)
			requireTooMany(t, err, 1)
			require.True(t, x.Release())
		})
	}
}

// A request counts while it is queued, and gives its room back as it gives up: by its timeout,
// as the timer fires and before its call returns, or by its ctx.
func TestMaxLocksQueuedRequestTakesRoom(t *testing.T) {
	for _, giveUp := range []string{"timeout", "ctx"} {
		t.Run(giveUp, func(t *testing.T) {
			clk, l, other := bounded(t, 1)
			_, err := other.Lock(context.Background(), []byte("busy"), node)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			res := lockAsync(ctx, l, []byte("busy"), recordlock.Options{Scope: recordlock.ScopeNode, Timeout: time.Second})
			waitingCount(t, l, 1)
			_, err = l.TryLock([]byte("b"), node)
			requireTooMany(t, err, 1)
			_, err = l.Lock(context.Background(), []byte("b"), node)
			requireTooMany(t, err, 1)

			var b *recordlock.Handle
			if giveUp == "timeout" {
				clk.Advance(2 * time.Second)
				b, err = l.TryLock([]byte("b"), node) // the timed-out call may not have returned yet
				require.NoError(t, err)
				require.ErrorIs(t, testutil.Await(t, res, "the timed-out Lock").err, recordlock.ErrTimeout)
			} else {
				cancel()
				require.ErrorIs(t, testutil.Await(t, res, "the cancelled Lock").err, context.Canceled)
				b, err = l.TryLock([]byte("b"), node)
				require.NoError(t, err)
			}
			_, err = l.TryLock([]byte("c"), node)
			requireTooMany(t, err, 1)
			require.True(t, b.Release())
		})
	}
}

// A request that never queued gives its room back as it fails: a TryLock of a busy key, and a Txn
// whose wait would close a cycle (the deadlock's victim).
func TestMaxLocksRefusedRequestMakesRoom(t *testing.T) {
	ctx := context.Background()
	t.Run("TryLock", func(t *testing.T) {
		_, l, other := bounded(t, 1)
		_, err := other.Lock(ctx, []byte("busy"), node)
		require.NoError(t, err)
		_, err = l.TryLock([]byte("busy"), node)
		require.ErrorIs(t, err, recordlock.ErrLocked)
		b, err := l.TryLock([]byte("b"), node)
		require.NoError(t, err)
		require.True(t, b.Release())
	})
	t.Run("deadlock", func(t *testing.T) {
		_, l, other := bounded(t, 2)
		victim, winner := l.Begin(), other.Begin()
		t.Cleanup(victim.Rollback)
		t.Cleanup(winner.Rollback)
		_, err := victim.Lock(ctx, []byte("y"), node)
		require.NoError(t, err)
		_, err = winner.Lock(ctx, []byte("x"), node)
		require.NoError(t, err)
		won := txnLockAsync(t, winner, []byte("y"), wait)
		waitQueued(t, l, []byte("y"), 1)

		_, err = victim.Lock(ctx, []byte("x"), wait)
		require.ErrorIs(t, err, recordlock.ErrDeadlock)
		z, err := l.TryLock([]byte("z"), node) // y and z: the victim's request left no room taken
		require.NoError(t, err)
		_, err = l.TryLock([]byte("w"), node)
		requireTooMany(t, err, 2)
		victim.Rollback()
		granted(t, won, "the winner's Lock")
		require.True(t, z.Release())
	})
}

// Shared holders of one key count one each, and a range lock counts once however many keys it
// covers.
func TestMaxLocksCountsHandles(t *testing.T) {
	ctx := context.Background()
	t.Run("shared", func(t *testing.T) {
		_, l, _ := bounded(t, 2)
		s1, err := l.Lock(ctx, []byte("s"), shared)
		require.NoError(t, err)
		_, err = l.TryLock([]byte("s"), shared)
		require.NoError(t, err)
		_, err = l.TryLock([]byte("s"), shared)
		requireTooMany(t, err, 2)
		assert.Equal(t, 2, l.Stats().Held)
		require.True(t, s1.Release())
		_, err = l.TryLock([]byte("s"), shared)
		require.NoError(t, err)
	})
	t.Run("range", func(t *testing.T) {
		_, l, _ := bounded(t, 2)
		txn := l.Begin()
		t.Cleanup(txn.Rollback)
		_, err := txn.LockRange(ctx, rng("a", ""), node)
		require.NoError(t, err)
		_, err = l.TryLockRange(rng("", "a"), node)
		require.NoError(t, err)
		_, err = txn.LockRange(ctx, rng("", "a"), shared)
		requireTooMany(t, err, 2)
	})
}

// Cluster-scoped locks count like any other: refused at the bound before the coordinator is
// asked, and a round that fails gives its room back.
func TestMaxLocksClusterScope(t *testing.T) {
	ctx := context.Background()
	clk, l, _ := bounded(t, 1)
	coord := newTestCoord(clk, l.Timestamp)
	l.SetCoordinator(coord)
	cluster := recordlock.Options{Scope: recordlock.ScopeCluster}

	a, err := l.Lock(ctx, []byte("a"), cluster)
	require.NoError(t, err)
	require.Equal(t, recordlock.ScopeCluster, a.Scope())
	_, err = l.Lock(ctx, []byte("b"), cluster)
	requireTooMany(t, err, 1)
	calls, _ := coord.counts()
	assert.Equal(t, 1, calls, "the refused lock asked the coordinator nothing")
	require.True(t, a.Release())

	coord.err = errors.New("no quorum")
	_, err = l.Lock(ctx, []byte("b"), cluster)
	require.ErrorIs(t, err, recordlock.ErrClusterUnavailable)
	coord.err = nil
	b, err := l.Lock(ctx, []byte("b"), cluster)
	require.NoError(t, err, "the failed round gave its room back")
	require.True(t, b.Release())
}

// Each Locker has a bound of its own, and one without the option has none.
func TestMaxLocksPerLocker(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	clk, one := manual(t, db, recordlock.WithMaxLocks(1))
	two := newLocker(t, db, recordlock.WithClock(clk), recordlock.WithMaxLocks(2))
	free := newLocker(t, db, recordlock.WithClock(clk))
	for i := range 100 {
		_, err := free.Lock(ctx, fmt.Appendf(nil, "free%d", i), node)
		require.NoError(t, err)
	}
	_, err := one.Lock(ctx, []byte("a"), node)
	require.NoError(t, err)
	_, err = two.Lock(ctx, []byte("b"), node)
	require.NoError(t, err)
	_, err = two.Lock(ctx, []byte("c"), node)
	require.NoError(t, err)
	_, err = one.Lock(ctx, []byte("d"), node)
	requireTooMany(t, err, 1)
	_, err = two.Lock(ctx, []byte("d"), node)
	requireTooMany(t, err, 2)
}

// WithMaxLocks below 1 is an *OptionError from New.
func TestMaxLocksOption(t *testing.T) {
	db := openDB(t)
	for _, n := range []int{0, -1} {
		l, err := recordlock.New(db, recordlock.WithMaxLocks(n))
		require.Nil(t, l)
		require.ErrorIs(t, err, recordlock.ErrInvalidOptions)
		var oe *recordlock.OptionError
		require.ErrorAs(t, err, &oe)
		assert.Equal(t, "MaxLocks", oe.Field)
		assert.Equal(t, n, oe.Value)
		assert.EqualError(t, err, fmt.Sprintf("recordlock: Locker option MaxLocks must be at least 1, got %d", n))
	}
	newLocker(t, db, recordlock.WithMaxLocks(1))
}

// BenchmarkUncontendedLockReleaseMaxLocks is P1 (BenchmarkUncontendedLockRelease) on a Locker
// kept to 1<<20 locks: what the bound's count costs the uncontended path.
func BenchmarkUncontendedLockReleaseMaxLocks(b *testing.B) {
	l := newLocker(b, openDB(b), recordlock.WithMaxLocks(1<<20))
	keys := benchKeys("k", 1<<16)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		h, err := l.Lock(ctx, keys[i&(len(keys)-1)], benchOpts)
		if err != nil {
			b.Fatal(err)
		}
		h.Release()
		i++
	}
}
