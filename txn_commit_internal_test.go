package recordlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/tempdb"
)

// Commit holds off the successor: a commit that is slow to write, and whose lease lapses
// while it writes, finishes before a waiting successor acquires, and the successor reads its
// result.
func TestTxnCommitHoldsOffSuccessor(t *testing.T) {
	db := tempdb.New(t)
	clk := NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	var inFence func()
	l := newHookedLocker(t, db, clk, &inFence)
	other := newTestLocker(t, db, clk)
	ctx := context.Background()
	key := []byte("k")

	txn := l.Begin()
	t.Cleanup(txn.Rollback) // after the Commit's goroutine has ended (testutil.Go)
	h, err := txn.Lock(ctx, key, Options{Lease: time.Second})
	require.NoError(t, err)
	require.NoError(t, txn.Put(key, []byte("first")))

	entered, proceed := make(chan struct{}), make(chan struct{})
	letProceed := sync.OnceFunc(func() { close(proceed) })
	inFence = func() {
		close(entered)
		<-proceed
	}
	committed := make(chan error, 1)
	testutil.Go(t, ctx, func(context.Context) { committed <- txn.Commit() })
	t.Cleanup(letProceed) // runs before the wait for the Commit, which may be held in its fence
	testutil.Await(t, entered, "Commit reaching its write")

	successor := lockAsync(ctx, other, key, Options{Timeout: time.Minute})
	WaitQueued(t, l, key, 1)

	clk.Advance(time.Second) // the lease lapses while the commit is writing
	assert.True(t, h.IsLeaseExpired())
	select {
	case <-h.Done():
	default:
		t.Error("Done stays open after the lease lapsed inside Fence")
	}
	_, err = other.TryLock(key, Options{})
	require.ErrorIs(t, err, ErrLocked, "the key must not pass on while the commit writes")
	select {
	case got := <-successor:
		t.Fatalf("the successor acquired mid-commit: %+v", got)
	default:
	}

	letProceed()
	require.NoError(t, testutil.Await(t, committed, "Commit"), "a commit that entered its fences in time lands")
	got := testutil.Await(t, successor, "the successor's grant after the commit")
	require.NoError(t, got.err)
	assert.Equal(t, []byte("first"), DBGet(t, db, "k"), "the successor reads the commit's result")
	assert.True(t, got.h.Release())
	assert.True(t, l.tab.Empty(), "nothing is left locked or queued")
}

// Fences nest in key order whatever the order writes were staged in, each handle once; a key
// taken anew after a release keeps both handles, the older first. A lock still held is checked
// and fenced with no write under it; one given back by a Release returning true is not.
func TestTxnProtectorsSortedByKey(t *testing.T) {
	db := tempdb.New(t)
	l := newTestLocker(t, db, NewManualClock(time.Unix(0, 0)))
	ctx := context.Background()
	txn, err := l.BeginTx(TxnOptions{AllowUnlockedWrites: true}) // "plain" is written unlocked
	require.NoError(t, err)
	defer txn.Rollback()
	lock := func(k string) *Handle {
		h, err := txn.Lock(ctx, []byte(k), Options{})
		require.NoError(t, err)
		return h
	}
	put := func(keys ...string) {
		for _, k := range keys {
			require.NoError(t, txn.Put([]byte(k), []byte("v")))
		}
	}
	c, a, b, unused := lock("c"), lock("a"), lock("b"), lock("0")
	require.True(t, lock("d").Release())
	put("c", "plain", "a")
	require.True(t, a.Release())
	a2 := lock("a")
	put("c", "b", "a")
	assert.Equal(t, []*Handle{unused, a, a2, b, c}, txn.checked(nil))
	assert.False(t, unused.IsExpired())
	require.NoError(t, txn.Commit())
	assert.True(t, unused.IsExpired(), "a lock that protects nothing is released too")
	assert.False(t, unused.IsLeaseExpired(), "released, not lapsed")
}

// Commit releases a lock without Hold as its fence ends (fenceThenRelease): the key is free and
// the handle released but not lease-expired, its release hook fires once, and a lock with Hold,
// or one upgraded to it, stays held.
func TestTxnCommitReleasesAsTheFenceEnds(t *testing.T) {
	db := tempdb.New(t)
	clk := NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	var inFence func()
	l := newHookedLocker(t, db, clk, &inFence)
	ctx := context.Background()

	for _, tc := range []struct {
		name        string
		opts        Options
		upgradeMid  bool // UpgradeToHold from another goroutine while the write runs
		wantHeldNow bool
	}{
		{name: "without Hold", opts: Options{Lease: time.Minute}},
		{name: "with Hold", opts: Options{Lease: time.Minute, Hold: true}, wantHeldNow: true},
		{name: "upgraded inside the commit", opts: Options{Lease: time.Minute}, upgradeMid: true, wantHeldNow: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := []byte("k-" + tc.name)
			txn := l.Begin()
			defer txn.Rollback()
			h, err := txn.Lock(ctx, key, tc.opts)
			require.NoError(t, err)
			var hooks int
			require.True(t, h.JoinClusterRound(l.Timestamp(), time.Minute, clk.Mono(), func() error { hooks++; return nil }))
			require.NoError(t, txn.Put(key, []byte("v")))
			if tc.upgradeMid {
				inFence = func() {
					done := make(chan error)
					go func() { done <- h.UpgradeToHold(0) }()
					require.NoError(t, <-done)
				}
			}
			require.NoError(t, txn.Commit())
			inFence = nil

			assert.Equal(t, []byte("v"), DBGet(t, db, string(key)))
			assert.False(t, h.IsLeaseExpired())
			next, err := l.TryLock(key, Options{})
			if tc.wantHeldNow {
				require.ErrorIs(t, err, ErrLocked)
				assert.False(t, h.IsExpired())
				assert.Zero(t, hooks)
				require.True(t, h.Release())
			} else {
				require.NoError(t, err, "the key is free once Commit returns")
				assert.True(t, h.IsExpired())
				assert.False(t, h.Release(), "already released by Commit")
				require.True(t, next.Release())
			}
			assert.Equal(t, 1, hooks, "the release hook fires once")
		})
	}
	assert.True(t, l.tab.Empty(), "nothing is left locked or queued")
}

// newHookedLocker is newTestLocker with Txn.Commit calling *inFence, when set, inside its fences.
// The Txn runs in the test's goroutine or one it waits for, so the variable needs no lock.
func newHookedLocker(t testing.TB, db *grocksdb.DB, clk Clock, inFence *func()) *Locker {
	t.Helper()
	l, err := New(db, WithClock(clk), failpointsOption{failpoints{inFence: func() {
		if f := *inFence; f != nil {
			f()
		}
	}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// A lock held only for reading is fenced too: once Commit has checked it, its key cannot pass to
// a successor until the write returns, even if its lease lapses meanwhile, and a read-only Commit
// enters the same fences.
func TestTxnCommitFencesReadLocks(t *testing.T) {
	for _, staged := range []bool{true, false} {
		t.Run(map[bool]string{true: "with a write", false: "read-only"}[staged], func(t *testing.T) {
			db := tempdb.New(t)
			clk := NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			var inFence func()
			l := newHookedLocker(t, db, clk, &inFence)
			other := newTestLocker(t, db, clk)
			ctx := context.Background()

			txn := l.Begin()
			defer txn.Rollback()
			read, err := txn.Lock(ctx, []byte("read"), Options{Lease: time.Second})
			require.NoError(t, err)
			_, err = txn.Lock(ctx, []byte("write"), Options{Lease: time.Minute})
			require.NoError(t, err)
			if staged {
				require.NoError(t, txn.Put([]byte("write"), []byte("v")))
			}
			var inside bool
			inFence = func() {
				inside = true
				clk.Advance(time.Second) // the read lock lapses after the check
				assert.True(t, read.IsLeaseExpired())
				_, err := other.TryLock([]byte("read"), Options{})
				assert.ErrorIs(t, err, ErrLocked, "the read lock's key must not pass on mid-commit")
			}
			require.NoError(t, txn.Commit(), "a commit that entered its fences in time succeeds")
			require.True(t, inside)
			h, err := other.TryLock([]byte("read"), Options{})
			require.NoError(t, err, "the key passes on once the commit returns")
			assert.True(t, h.Release())
			assert.True(t, l.tab.Empty(), "nothing is left locked or queued")
		})
	}
}
