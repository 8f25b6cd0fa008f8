package recordlock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// Re-entrancy returns the same handle without touching the table; upgrade keeps AcquiredAt.
func TestTxnReentrantLock(t *testing.T) {
	_, clk, l, other := lockerPair(t)
	ctx := context.Background()
	key := []byte("k")

	txn := l.Begin()
	defer txn.Rollback()
	h, err := txn.Lock(ctx, key, recordlock.Options{Lease: time.Second, Scope: recordlock.ScopeNode})
	require.NoError(t, err)
	acquired := h.AcquiredAt()

	// Another Locker queues for the key. If the Txn went back to the table it would queue behind
	// that waiter, or wait for itself, and time out on the guard instead of returning at once.
	waiter := lockAsync(context.Background(), other, []byte("k"), recordlock.Options{Timeout: time.Minute})
	waitQueued(t, l, key, 1)
	reentryCtx, cancel := context.WithTimeout(ctx, guard)
	defer cancel()
	again, err := txn.Lock(reentryCtx, key, recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	assert.Same(t, h, again)
	assert.Equal(t, acquired, again.AcquiredAt())
	assert.False(t, again.Hold())

	_, err = txn.Lock(ctx, key, recordlock.Options{Scope: recordlock.ScopeCluster})
	require.ErrorIs(t, err, recordlock.ErrScopeConflict)
	assert.False(t, h.IsExpired(), "a scope conflict leaves the handle alone")

	clk.Advance(500 * time.Millisecond)
	up, err := txn.Lock(ctx, key, recordlock.Options{Hold: true, Lease: 2 * time.Second})
	require.NoError(t, err)
	assert.Same(t, h, up)
	assert.True(t, h.Hold())
	assert.Equal(t, acquired, h.AcquiredAt(), "the upgrade keeps AcquiredAt")
	assert.Equal(t, epoch.Add(2500*time.Millisecond).UnixNano(), h.ExpiresAt().UnixNano(), "the upgrade renews the lease from now")

	clk.Advance(time.Second) // past the original lease, inside the upgraded one
	assert.False(t, h.IsExpired())

	require.NoError(t, txn.Commit())
	assert.False(t, h.IsExpired(), "a held lock survives Commit")
	_, err = other.TryLock(key, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked)
	require.True(t, h.Release())
	res := testutil.Await(t, waiter, "the waiter's grant")
	require.NoError(t, res.err)
	assert.True(t, res.h.Release())
}

func TestTxnLockRejectsBadInput(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	txn := l.Begin()
	defer txn.Rollback()
	ctx := context.Background()

	_, err := txn.Lock(ctx, []byte("k"), recordlock.Options{Lease: 5 * time.Millisecond})
	require.ErrorIs(t, err, recordlock.ErrInvalidOptions)
	_, err = txn.Lock(ctx, []byte("k"), recordlock.Options{Scope: recordlock.Scope(9)})
	require.ErrorIs(t, err, recordlock.ErrInvalidOptions)
	_, err = txn.Lock(ctx, nil, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrInvalidKey)
	require.ErrorIs(t, txn.Put(nil, []byte("v")), recordlock.ErrInvalidKey)
	require.ErrorIs(t, txn.Delete([]byte{}), recordlock.ErrInvalidKey)
	_, err = txn.Get(nil)
	require.ErrorIs(t, err, recordlock.ErrInvalidKey)

	h, err := txn.Lock(ctx, []byte("k"), recordlock.Options{})
	require.NoError(t, err)
	_, err = txn.Lock(ctx, []byte("k"), recordlock.Options{Hold: true, Lease: time.Hour})
	require.ErrorIs(t, err, recordlock.ErrInvalidOptions, "a re-entrant Lock validates its options too")
	assert.False(t, h.Hold(), "a rejected upgrade changes nothing")

	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = txn.Lock(done, []byte("free"), recordlock.Options{})
	require.ErrorIs(t, err, context.Canceled)
	_, err = l.TryLock([]byte("free"), recordlock.Options{})
	require.NoError(t, err, "a failed Lock leaves nothing locked")
}

// A dead handle is not reused: Lock takes the key anew. A write staged before the release stays
// protected by the old handle, so its lease still decides the Commit.
func TestTxnRelockAfterRelease(t *testing.T) {
	for _, oldLapses := range []bool{false, true} {
		t.Run("old lease lapses="+strconv.FormatBool(oldLapses), func(t *testing.T) {
			db := openDB(t)
			clk, l := manual(t, db)
			ctx := context.Background()
			txn := l.Begin()
			defer txn.Rollback()
			h1, err := txn.Lock(ctx, []byte("k"), recordlock.Options{Lease: time.Second})
			require.NoError(t, err)
			require.NoError(t, txn.Put([]byte("k"), []byte("v1")))
			require.True(t, h1.Release())
			h2, err := txn.Lock(ctx, []byte("k"), recordlock.Options{Lease: time.Minute})
			require.NoError(t, err)
			assert.NotSame(t, h1, h2)
			assert.False(t, h2.IsExpired())
			require.NoError(t, txn.Put([]byte("k"), []byte("v2")))
			if !oldLapses {
				require.NoError(t, txn.Commit())
				assert.Equal(t, []byte("v2"), dbGet(t, db, "k"))
			} else {
				clk.Advance(time.Second)
				require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired)
				assert.Nil(t, dbGet(t, db, "k"))
			}
			assert.True(t, h2.IsExpired(), "Commit released the new lock")
		})
	}
}

// Get sees the Txn's own staged writes and deletes, and the committed writes of others.
func TestTxnGetOverlaysStagedWrites(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	dbPut(t, db, "a", "committed-a")
	dbPut(t, db, "b", "committed-b")

	txn := beginUnlocked(t, l)
	defer txn.Rollback()
	_, err := txn.Lock(ctx, []byte("a"), recordlock.Options{})
	require.NoError(t, err)

	got, err := txn.Get([]byte("a"))
	require.NoError(t, err)
	assert.Equal(t, []byte("committed-a"), got)
	got, err = txn.Get([]byte("missing"))
	require.NoError(t, err)
	assert.Nil(t, got)

	key, val := []byte("a"), []byte("staged-a")
	require.NoError(t, txn.Put(key, val))
	key[0], val[0] = 'z', 'Z' // the caller may reuse its slices
	got, err = txn.Get([]byte("a"))
	require.NoError(t, err)
	assert.Equal(t, []byte("staged-a"), got)
	got[0] = '!' // the result belongs to the caller
	got, err = txn.Get([]byte("a"))
	require.NoError(t, err)
	assert.Equal(t, []byte("staged-a"), got)

	require.NoError(t, txn.Delete([]byte("b")))
	got, err = txn.Get([]byte("b"))
	require.NoError(t, err)
	assert.Nil(t, got, "a staged delete hides the committed value")
	require.NoError(t, txn.Put([]byte("b"), nil))
	got, err = txn.Get([]byte("b"))
	require.NoError(t, err)
	assert.Equal(t, []byte{}, got, "an empty value is not a missing one")

	dbPut(t, db, "c", "others")
	got, err = txn.Get([]byte("c"))
	require.NoError(t, err)
	assert.Equal(t, []byte("others"), got, "no snapshot: another writer's commit is visible at once")
	dbPut(t, db, "a", "others-a")
	got, err = txn.Get([]byte("a"))
	require.NoError(t, err)
	assert.Equal(t, []byte("staged-a"), got, "the Txn's own write wins")

	require.NoError(t, txn.Put([]byte("d"), []byte("1")))
	require.NoError(t, txn.Delete([]byte("d")))
	require.NoError(t, txn.Put([]byte("d"), []byte("2")))
	require.NoError(t, txn.Commit())
	assert.Equal(t, []byte("staged-a"), dbGet(t, db, "a"))
	assert.Equal(t, []byte{}, dbGet(t, db, "b"))
	assert.Equal(t, []byte("2"), dbGet(t, db, "d"), "the batch keeps the order of staging")
	assert.Nil(t, dbGet(t, db, "z"), "the reused key slice was copied")
}

// A Get of a key the Txn holds whose lease ended fails with ErrLeaseExpired, staged write or not,
// in any column family; a key the Txn released, or never locked, reads unprotected.
func TestTxnGetUnderEndedLease(t *testing.T) {
	db, cfs := openCFDB(t, "one")
	clk, l := manual(t, db)
	ctx := context.Background()
	dbPut(t, db, "k", "v")
	cf := cfs[0]

	txn := beginUnlocked(t, l)
	defer txn.Rollback()
	lapsed, err := txn.Lock(ctx, []byte("k"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	_, err = txn.LockCF(ctx, cf, []byte("k"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	staged, err := txn.Lock(ctx, []byte("staged"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("staged"), []byte("mine")))
	revoked, err := txn.Lock(ctx, []byte("revoked"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	released, err := txn.Lock(ctx, []byte("released"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	require.True(t, released.Release())
	live, err := txn.Lock(ctx, []byte("live"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)

	got, err := txn.Get([]byte("k"))
	require.NoError(t, err)
	assert.Equal(t, []byte("v"), got)
	revoked.RevokeLease()
	clk.Advance(time.Second)
	require.True(t, lapsed.IsLeaseExpired())
	require.True(t, staged.IsLeaseExpired())

	for _, tc := range []struct {
		name string
		get  func() ([]byte, error)
		want error
	}{
		{"lapsed", func() ([]byte, error) { return txn.Get([]byte("k")) }, recordlock.ErrLeaseExpired},
		{"lapsed in a column family", func() ([]byte, error) { return txn.GetCF(cf, []byte("k")) }, recordlock.ErrLeaseExpired},
		{"lapsed with a staged write", func() ([]byte, error) { return txn.Get([]byte("staged")) }, recordlock.ErrLeaseExpired},
		{"revoked", func() ([]byte, error) { return txn.Get([]byte("revoked")) }, recordlock.ErrLeaseExpired},
		{"released before the lapse", func() ([]byte, error) { return txn.Get([]byte("released")) }, nil},
		{"live", func() ([]byte, error) { return txn.Get([]byte("live")) }, nil},
		{"never locked", func() ([]byte, error) { return txn.Get([]byte("other")) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := tc.get()
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
				assert.Nil(t, v)
				return
			}
			require.NoError(t, err)
			assert.Nil(t, v, "nothing committed under this key")
		})
	}
	assert.False(t, live.IsExpired())
	require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired)
}

// Rollback is idempotent and safe after Commit; a Txn after its end returns ErrTxnDone.
func TestTxnRollbackAndDone(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()

	txn := beginUnlocked(t, l)
	plain, err := txn.Lock(ctx, []byte("a"), recordlock.Options{})
	require.NoError(t, err)
	held, err := txn.Lock(ctx, []byte("h"), recordlock.Options{Hold: true})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("a"), []byte("1")))
	require.NoError(t, txn.Put([]byte("x"), []byte("1")))
	txn.Rollback()
	txn.Rollback()
	assert.Nil(t, dbGet(t, db, "a"), "Rollback discards staged writes")
	assert.Nil(t, dbGet(t, db, "x"))
	assert.True(t, plain.IsExpired(), "Rollback released the non-hold lock")
	assert.False(t, held.IsExpired(), "a held lock survives Rollback")
	assertDone(t, txn)

	txn = l.Begin()
	_, err = txn.Lock(ctx, []byte("b"), recordlock.Options{})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("b"), []byte("1")))
	require.NoError(t, txn.Commit())
	txn.Rollback()
	txn.Rollback()
	assert.Equal(t, []byte("1"), dbGet(t, db, "b"), "Rollback after Commit undoes nothing")
	assertDone(t, txn)
	assert.True(t, held.Release())
}

func assertDone(t *testing.T, txn *recordlock.Txn) {
	t.Helper()
	_, err := txn.Lock(context.Background(), []byte("z"), recordlock.Options{})
	assert.ErrorIs(t, err, recordlock.ErrTxnDone)
	_, err = txn.Get([]byte("z"))
	assert.ErrorIs(t, err, recordlock.ErrTxnDone)
	assert.ErrorIs(t, txn.Put([]byte("z"), nil), recordlock.ErrTxnDone)
	assert.ErrorIs(t, txn.Delete([]byte("z")), recordlock.ErrTxnDone)
	assert.ErrorIs(t, txn.Commit(), recordlock.ErrTxnDone)
}

// After the Locker's Close every call fails with ErrClosed and Commit writes nothing.
func TestTxnAfterLockerClose(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	txn := beginUnlocked(t, l)
	_, err := txn.Lock(context.Background(), []byte("a"), recordlock.Options{})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("a"), []byte("1")))
	require.NoError(t, txn.Put([]byte("plain"), []byte("1")))
	require.NoError(t, l.Close())

	_, err = txn.Lock(context.Background(), []byte("b"), recordlock.Options{})
	assert.ErrorIs(t, err, recordlock.ErrClosed)
	_, err = txn.Get([]byte("a"))
	assert.ErrorIs(t, err, recordlock.ErrClosed)
	assert.ErrorIs(t, txn.Put([]byte("a"), nil), recordlock.ErrClosed)
	assert.ErrorIs(t, txn.Delete([]byte("a")), recordlock.ErrClosed)
	assert.ErrorIs(t, txn.Commit(), recordlock.ErrClosed)
	txn.Rollback()
	assert.Nil(t, dbGet(t, db, "a"))
	assert.Nil(t, dbGet(t, db, "plain"))
	assert.ErrorIs(t, l.Begin().Commit(), recordlock.ErrClosed)
}

// Re-entry may narrow a cluster lock to node scope, never widen a node lock to cluster scope.
func TestTxnReentrantScope(t *testing.T) {
	for _, tc := range []struct {
		name        string
		coordinator bool
		first, then recordlock.Scope
		conflict    bool
	}{
		{"standalone: node then cluster", false, recordlock.ScopeDefault, recordlock.ScopeCluster, true},
		{"standalone: node then default", false, recordlock.ScopeDefault, recordlock.ScopeDefault, false},
		{"standalone: node then node", false, recordlock.ScopeDefault, recordlock.ScopeNode, false},
		{"coordinated: node then default", true, recordlock.ScopeNode, recordlock.ScopeDefault, true},
		{"coordinated: node then cluster", true, recordlock.ScopeNode, recordlock.ScopeCluster, true},
		{"coordinated: cluster then node", true, recordlock.ScopeDefault, recordlock.ScopeNode, false},
		{"coordinated: cluster then cluster", true, recordlock.ScopeCluster, recordlock.ScopeCluster, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openDB(t)
			clk, l := manual(t, db)
			if tc.coordinator {
				l.SetCoordinator(grantAll{clk})
			}
			ctx := context.Background()
			txn := l.Begin()
			defer txn.Rollback()
			h, err := txn.Lock(ctx, []byte("k"), recordlock.Options{Scope: tc.first})
			require.NoError(t, err)
			again, err := txn.Lock(ctx, []byte("k"), recordlock.Options{Scope: tc.then})
			if tc.conflict {
				require.ErrorIs(t, err, recordlock.ErrScopeConflict)
				assert.Nil(t, again)
				assert.False(t, h.IsExpired(), "a conflict leaves the held lock alone")
				return
			}
			require.NoError(t, err)
			assert.Same(t, h, again)
		})
	}
}

// BeginTx validates its options; Sync and DisableWAL become the write options of Commit.
func TestBeginTxOptions(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()

	_, err := l.BeginTx(recordlock.TxnOptions{Sync: true, DisableWAL: true})
	require.ErrorIs(t, err, recordlock.ErrInvalidOptions, "Sync and DisableWAL together are ErrInvalidOptions")
	var oe *recordlock.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "DisableWAL", oe.Field)
	assert.EqualError(t, err, "recordlock: txn option DisableWAL cannot be combined with Sync, got true")

	for _, opts := range []recordlock.TxnOptions{
		{},
		{Name: "sync", Sync: true},
		{Name: "no wal", DisableWAL: true},
	} {
		txn, err := l.BeginTx(opts)
		require.NoError(t, err)
		assert.Equal(t, opts.Name, txn.Name())
		key := []byte("k-" + opts.Name)
		_, err = txn.Lock(ctx, key, recordlock.Options{})
		require.NoError(t, err)
		require.NoError(t, txn.Put(key, []byte("v")))
		require.NoError(t, txn.Commit())
		assert.Equal(t, []byte("v"), dbGet(t, db, string(key)), "committed with %+v", opts)
	}
	assert.Empty(t, l.Begin().Name())
}

// The victim of a deadlock that rolls back and retries at once finds the key it gave up handed to
// the Txn it lost to, which holds the other key of the cycle: it queues behind that Txn instead
// of taking the key back and closing the same cycle again (docs/DESIGN.md §6). The winner holds
// x by a lock of its own, by a range lock over it (a Txn that holds only ranges holds keys too),
// or by LockAll, whose first key it already holds as it waits for the second.
func TestDeadlockVictimRetryQueuesBehindWinner(t *testing.T) {
	x, y := []byte("x"), []byte("y")
	for _, name := range []string{"Lock", "LockRange", "LockAll"} {
		t.Run(name, func(t *testing.T) {
			db := openDB(t)
			_, l := manual(t, db)
			winner, victim := l.Begin(), l.Begin()
			t.Cleanup(winner.Rollback)
			defer victim.Rollback()
			_, err := victim.Lock(context.Background(), y, recordlock.Options{})
			require.NoError(t, err)
			var won <-chan error
			switch name {
			case "LockAll":
				c := lockAllAsync(t, context.Background(), winner, recordlock.Options{}, x, y)
				won = receive(c, func(r lockAllResult) error { return r.err })
			case "LockRange":
				_, err := winner.LockRange(context.Background(), rng("w", "xx"), recordlock.Options{})
				require.NoError(t, err)
				c := txnLockAsync(t, winner, y, recordlock.Options{})
				won = receive(c, func(r lockResult) error { return r.err })
			default:
				_, err := winner.Lock(context.Background(), x, recordlock.Options{})
				require.NoError(t, err)
				c := txnLockAsync(t, winner, y, recordlock.Options{})
				won = receive(c, func(r lockResult) error { return r.err })
			}
			waitQueued(t, l, y, 1)

			_, err = victim.Lock(context.Background(), x, recordlock.Options{})
			require.ErrorIs(t, err, recordlock.ErrDeadlock)
			victim.Rollback()
			// The retry's first Lock, made before the winner's goroutine may have run.
			_, err = l.TryLock(y, recordlock.Options{})
			require.ErrorIs(t, err, recordlock.ErrLocked, "the victim's key went to the winner")

			require.NoError(t, testutil.Await(t, won, "the winner's Lock"))
			require.NoError(t, winner.Put(x, []byte("1")))
			require.NoError(t, winner.Put(y, []byte("1")))
			require.NoError(t, winner.Commit())
			assert.True(t, recordlock.ProbeTableEmpty(l))
		})
	}
}

// receive forwards the error of the one result c delivers.
func receive[T any](c <-chan T, err func(T) error) <-chan error {
	out := make(chan error, 1)
	go func() { out <- err(<-c) }()
	return out
}
