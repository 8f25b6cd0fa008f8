package recordlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// 1. Re-entrancy returns the same handle without touching the table; upgrade keeps AcquiredAt.
func TestTxnReentrantLock(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	other := newLocker(t, db, recordlock.WithClock(clk))
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
	time.Sleep(10 * time.Millisecond)
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
	res := await(t, waiter, "the waiter's grant")
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

// 2. Plain writes to unlocked keys are never blocked by locks.
func TestTxnPlainWritesNotBlockedByLocks(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	other := newLocker(t, db, recordlock.WithClock(clk))
	ctx := context.Background()

	held, err := other.Lock(ctx, []byte("a"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)

	txn := beginUnlocked(t, l)
	defer txn.Rollback()
	_, err = txn.Lock(ctx, []byte("mine"), recordlock.Options{})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("a"), []byte("plain")), "a key this Txn did not lock needs no live handle")
	require.NoError(t, txn.Put([]byte("b"), []byte("free")))
	require.NoError(t, txn.Put([]byte("mine"), []byte("fenced")))

	committed := make(chan error, 1)
	go func() { committed <- txn.Commit() }()
	require.NoError(t, await(t, committed, "Commit"))

	assert.Equal(t, []byte("plain"), dbGet(t, db, "a"))
	assert.Equal(t, []byte("free"), dbGet(t, db, "b"))
	assert.Equal(t, []byte("fenced"), dbGet(t, db, "mine"))
	assert.False(t, held.IsExpired(), "another holder's lock is untouched by a plain write")
	_, err = l.TryLock([]byte("a"), recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked)
	assert.True(t, held.Release())
}

// 3. A multi-key Commit is all-or-nothing: if one protecting lease lapsed, no key changed.
func TestTxnCommitAllOrNothing(t *testing.T) {
	keys := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name  string
		dead  string
		end   func(clk *recordlock.ManualClock, h *recordlock.Handle)
		lease time.Duration
	}{
		{name: "first key lapses", dead: "a", end: func(clk *recordlock.ManualClock, _ *recordlock.Handle) { clk.Advance(time.Second) }},
		{name: "last key lapses", dead: "c", end: func(clk *recordlock.ManualClock, _ *recordlock.Handle) { clk.Advance(time.Second) }},
		{name: "middle key revoked", dead: "b", end: func(_ *recordlock.ManualClock, h *recordlock.Handle) { h.RevokeLease() }},
		{name: "released then lapsed", dead: "b", end: func(clk *recordlock.ManualClock, h *recordlock.Handle) {
			h.Release()
			clk.Advance(time.Second)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openDB(t)
			clk, l := manual(t, db)
			ctx := context.Background()
			for _, k := range keys {
				dbPut(t, db, k, "old")
			}
			txn := beginUnlocked(t, l)
			defer txn.Rollback()
			handles := map[string]*recordlock.Handle{}
			for _, k := range keys {
				lease := 10 * time.Second
				if k == tc.dead {
					lease = time.Second
				}
				h, err := txn.Lock(ctx, []byte(k), recordlock.Options{Lease: lease})
				require.NoError(t, err)
				handles[k] = h
				require.NoError(t, txn.Put([]byte(k), []byte("new")))
			}
			require.NoError(t, txn.Put([]byte("plain"), []byte("new")))
			require.NoError(t, txn.Delete([]byte("a")))

			tc.end(clk, handles[tc.dead])
			require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired)
			for _, k := range keys {
				assert.Equal(t, []byte("old"), dbGet(t, db, k), "key %s", k)
				assert.True(t, handles[k].IsExpired(), "Commit released %s", k)
			}
			assert.Nil(t, dbGet(t, db, "plain"), "the plain write of a fenced batch does not land either")
		})
	}
}

// 4. Lease lapse between Put and Commit: ErrLeaseExpired, nothing written, sibling locks
// released, and a waiter on a sibling key proceeds at once.
func TestTxnLeaseLapseBeforeCommitReleasesSiblings(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	other := newLocker(t, db, recordlock.WithClock(clk))
	ctx := context.Background()

	txn := l.Begin()
	defer txn.Rollback()
	short, err := txn.Lock(ctx, []byte("a"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	sibling, err := txn.Lock(ctx, []byte("b"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	held, err := txn.Lock(ctx, []byte("held"), recordlock.Options{Lease: time.Minute, Hold: true})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("a"), []byte("1")))
	require.NoError(t, txn.Put([]byte("b"), []byte("1")))
	require.NoError(t, txn.Put([]byte("held"), []byte("1")))

	waiter := lockAsync(context.Background(), other, []byte("b"), recordlock.Options{Timeout: time.Minute})
	time.Sleep(10 * time.Millisecond) // let it queue; the outcome does not depend on it
	clk.Advance(time.Second)
	require.True(t, short.IsLeaseExpired())
	require.False(t, sibling.IsExpired())

	require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired)
	// The clock does not move again, so the waiter's only way out is the sibling's release.
	res := await(t, waiter, "the sibling waiter's grant")
	require.NoError(t, res.err)
	assert.True(t, sibling.IsExpired())
	assert.False(t, held.IsExpired(), "a held lock survives a fenced Commit")
	for _, k := range []string{"a", "b", "held"} {
		assert.Nil(t, dbGet(t, db, k), "key %s", k)
	}
	assert.True(t, res.h.Release())
	assert.True(t, held.Release())
}

// Staging a write to a locked key needs a live handle; a write staged before Release commits
// while the lease lasts; after RevokeLease it is fenced.
func TestTxnStagingNeedsLiveHandle(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	ctx := context.Background()

	t.Run("released", func(t *testing.T) {
		txn := l.Begin()
		defer txn.Rollback()
		h, err := txn.Lock(ctx, []byte("r"), recordlock.Options{})
		require.NoError(t, err)
		require.True(t, h.Release())
		require.ErrorIs(t, txn.Put([]byte("r"), []byte("v")), recordlock.ErrReleased)
		require.ErrorIs(t, txn.Delete([]byte("r")), recordlock.ErrReleased)
		require.NoError(t, txn.Commit())
		assert.Nil(t, dbGet(t, db, "r"), "a rejected write is not staged")
	})
	t.Run("lapsed", func(t *testing.T) {
		txn := l.Begin()
		defer txn.Rollback()
		_, err := txn.Lock(ctx, []byte("x"), recordlock.Options{Lease: time.Second})
		require.NoError(t, err)
		clk.Advance(time.Second)
		require.ErrorIs(t, txn.Put([]byte("x"), []byte("v")), recordlock.ErrLeaseExpired)
		require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired, "the Txn still holds x, whose lease ended")
		assert.Nil(t, dbGet(t, db, "x"))
	})
	t.Run("released after staging commits", func(t *testing.T) {
		txn := l.Begin()
		defer txn.Rollback()
		h, err := txn.Lock(ctx, []byte("s"), recordlock.Options{Lease: time.Second})
		require.NoError(t, err)
		require.NoError(t, txn.Put([]byte("s"), []byte("v")))
		require.True(t, h.Release())
		clk.Advance(500 * time.Millisecond)
		require.NoError(t, txn.Commit())
		assert.Equal(t, []byte("v"), dbGet(t, db, "s"))
	})
	t.Run("revoked after release is fenced", func(t *testing.T) {
		txn := l.Begin()
		defer txn.Rollback()
		h, err := txn.Lock(ctx, []byte("v"), recordlock.Options{Lease: time.Second})
		require.NoError(t, err)
		require.NoError(t, txn.Put([]byte("v"), []byte("v")))
		require.True(t, h.Release())
		h.RevokeLease()
		require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired)
		assert.Nil(t, dbGet(t, db, "v"))
	})
}

// 5. Get sees the Txn's own staged writes and deletes, and the committed writes of others.
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

// Staged keys and values of every size stay intact and apart: small ones share room inside the
// Txn until it is full, larger ones get their own copy, and the caller's slices are reused at once.
func TestTxnStagedBytesKeptApart(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	txn := beginUnlocked(t, l)
	defer txn.Rollback()
	want := map[string]string{
		"s1":         "small",
		"big":        strings.Repeat("B", 100),
		"s2":         "tiny",
		"long-key/x": strings.Repeat("v", 20),
		"s3":         "after",
		"s4":         "",
	}
	order := []string{"s1", "big", "s2", "long-key/x", "s3", "s4"}
	buf := make([]byte, 0, 128)
	for i, k := range order {
		if i%2 == 0 {
			_, err := txn.Lock(ctx, []byte(k), recordlock.Options{})
			require.NoError(t, err)
		}
		kb := append([]byte(nil), k...)
		vb := append(buf[:0], want[k]...)
		require.NoError(t, txn.Put(kb, vb))
		clear(kb) // the caller may reuse its slices
		for j := range vb {
			vb[j] = '!'
		}
	}
	for _, k := range order {
		got, err := txn.Get([]byte(k))
		require.NoError(t, err)
		assert.Equal(t, want[k], string(got), "staged %q", k)
	}
	require.NoError(t, txn.Commit())
	for _, k := range order {
		assert.Equal(t, want[k], string(dbGet(t, db, k)), "committed %q", k)
	}
}

// Many keys in one Txn: the lookups stay correct past the size where they switch to a map.
func TestTxnManyKeys(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	txn := beginUnlocked(t, l)
	defer txn.Rollback()
	const n = 50
	first := map[int]*recordlock.Handle{}
	for i := range n {
		k := []byte("k" + strconv.Itoa(i))
		if i%2 == 0 {
			h, err := txn.Lock(ctx, k, recordlock.Options{})
			require.NoError(t, err)
			first[i] = h
		}
		require.NoError(t, txn.Put(k, []byte("v1")))
	}
	for i := range n {
		k := []byte("k" + strconv.Itoa(i))
		h, err := txn.Lock(ctx, k, recordlock.Options{Timeout: time.Millisecond})
		require.NoError(t, err)
		if prev, ok := first[i]; ok {
			require.Same(t, prev, h, "key %d is re-entered", i)
		}
		require.NoError(t, txn.Put(k, []byte("v"+strconv.Itoa(i))))
		got, err := txn.Get(k)
		require.NoError(t, err)
		require.Equal(t, "v"+strconv.Itoa(i), string(got))
	}
	require.NoError(t, txn.Commit())
	for i := range n {
		k := "k" + strconv.Itoa(i)
		assert.Equal(t, "v"+strconv.Itoa(i), string(dbGet(t, db, k)))
		_, err := l.TryLock([]byte(k), recordlock.Options{})
		require.NoError(t, err, "Commit released %s", k)
	}
}

// 7. No lost update under stalls, on the real clock: transactions that stall past their lease
// are fenced, so every counter equals the number of increments that committed.
//
// Each worker stays on one counter and moves to the next when its Lock times out (the holder is
// then most likely stalled): if every worker waited out every stall, the run would take a minute
// of mostly idle waiting; this way it is bounded by the workers' own stalls.
func TestTxnNoLostUpdateUnderStalls(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds of real time")
	}
	const (
		workers    = 8
		counters   = 4
		increments = 2000 // per worker and counter
		lease      = 100 * time.Millisecond
		stall      = 150 * time.Millisecond
		stallEvery = 100 // about 1% of transactions
		timeout    = 10 * time.Millisecond
	)
	db := openDB(t)
	l := newLocker(t, db)
	ctx := context.Background()
	var (
		committed [counters]atomic.Int64
		fenced    atomic.Int64
		timeouts  atomic.Int64
		wg        sync.WaitGroup
	)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			c := w % counters
			for i := 0; i < counters*increments; {
				key := []byte("counter-" + strconv.Itoa(c))
				stalls := i%stallEvery == stallEvery-1
				err := increment(ctx, l, key, recordlock.Options{Lease: lease, Timeout: timeout}, stalls, stall)
				switch {
				case err == nil:
					committed[c].Add(1)
				case errors.Is(err, recordlock.ErrLeaseExpired):
					fenced.Add(1)
				case errors.Is(err, recordlock.ErrTimeout):
					timeouts.Add(1)
					c = (c + 1) % counters
					continue // not an attempt: nothing was staged
				default:
					t.Errorf("worker %d: %v", w, err)
					return
				}
				i++
			}
		})
	}
	wg.Wait()
	var total int64
	for c := range counters {
		got, err := strconv.ParseInt(string(dbGet(t, db, "counter-"+strconv.Itoa(c))), 10, 64)
		require.NoError(t, err)
		assert.Equal(t, committed[c].Load(), got, "counter %d: value read back vs successful commits", c)
		t.Logf("counter %d: %d successful commits, %d read back", c, committed[c].Load(), got)
		total += committed[c].Load()
	}
	assert.Equal(t, int64(workers*counters*increments), total+fenced.Load(), "every attempt either committed or was fenced")
	assert.GreaterOrEqual(t, fenced.Load(), int64(workers*counters*increments/stallEvery), "every stalled transaction was fenced")
	t.Logf("%d commits, %d fenced, %d lock timeouts, %v", total, fenced.Load(), timeouts.Load(), time.Since(start).Round(time.Millisecond))
}

// increment adds one to the decimal counter at key in one Txn, stalling before Commit if asked.
func increment(ctx context.Context, l *recordlock.Locker, key []byte, opts recordlock.Options, stalls bool, stall time.Duration) error {
	txn := l.Begin()
	defer txn.Rollback()
	if _, err := txn.Lock(ctx, key, opts); err != nil {
		return err
	}
	v, err := txn.Get(key)
	if err != nil {
		return err
	}
	n := 0
	if v != nil {
		if n, err = strconv.Atoi(string(v)); err != nil {
			return err
		}
	}
	if err := txn.Put(key, []byte(strconv.Itoa(n+1))); err != nil {
		return err
	}
	if stalls {
		time.Sleep(stall) // real time is the thing under test: the holder outlives its lease
	}
	return txn.Commit()
}

// 8. Rollback is idempotent and safe after Commit; a Txn after its end returns ErrTxnDone.
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

// A Commit with nothing staged checks the locks the Txn holds, writes nothing, and releases them:
// a lapsed lease makes it ErrLeaseExpired.
func TestTxnEmptyCommitChecksAndReleases(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	txn := l.Begin()
	a, err := txn.Lock(context.Background(), []byte("a"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	b, err := txn.Lock(context.Background(), []byte("b"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	clk.Advance(time.Second)
	require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired)
	assert.True(t, a.IsLeaseExpired())
	assert.True(t, b.IsExpired())
	assert.False(t, b.IsLeaseExpired(), "released, not lapsed")
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
