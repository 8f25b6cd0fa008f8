package recordlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// Range locks through the Locker (docs/DESIGN.md §16.1): validation, scope, the handle, conflicts
// with keys and fairness among them.

// lockRangeAsync starts l.LockRange in a goroutine and returns where its result arrives.
func lockRangeAsync(ctx context.Context, l *recordlock.Locker, r recordlock.Range, opts recordlock.Options) <-chan lockResult {
	c := make(chan lockResult, 1)
	go func() {
		h, err := l.LockRange(ctx, r, opts)
		c <- lockResult{h, err}
	}()
	return c
}

// A range whose End is not after its Start is refused with ErrInvalidKey by every call that takes
// one, before anything is locked: the table stays empty and nothing is counted.
func TestLockRangeInvalidChangesNothing(t *testing.T) {
	db, cfs := openCFDB(t, "other")
	_, l := manual(t, db)
	ctx := context.Background()
	bad := map[string]recordlock.Range{
		"End equal to Start":  rng("b", "b"),
		"End before Start":    rng("b", "a"),
		"empty End, no Start": {Start: nil, End: []byte{}},
		"empty End":           {Start: []byte("a"), End: []byte{}},
	}
	for name, r := range bad {
		t.Run(name, func(t *testing.T) {
			calls := map[string]func() (*recordlock.Handle, error){
				"LockRange":      func() (*recordlock.Handle, error) { return l.LockRange(ctx, r, node) },
				"LockRangeCF":    func() (*recordlock.Handle, error) { return l.LockRangeCF(ctx, cfs[0], r, node) },
				"TryLockRange":   func() (*recordlock.Handle, error) { return l.TryLockRange(r, node) },
				"TryLockRangeCF": func() (*recordlock.Handle, error) { return l.TryLockRangeCF(cfs[0], r, node) },
				"Txn.LockRange": func() (*recordlock.Handle, error) {
					txn := l.Begin()
					defer txn.Rollback()
					return txn.LockRange(ctx, r, node)
				},
				"Txn.LockRangeCF": func() (*recordlock.Handle, error) {
					txn := l.Begin()
					defer txn.Rollback()
					return txn.LockRangeCF(ctx, cfs[0], r, node)
				},
				"Txn.Scan": func() (*recordlock.Handle, error) {
					txn := l.Begin()
					defer txn.Rollback()
					return nil, txn.Scan(r, func(_, _ []byte) error { return nil })
				},
			}
			for call, lock := range calls {
				h, err := lock()
				require.ErrorIs(t, err, recordlock.ErrInvalidKey, call)
				assert.Nil(t, h, call)
			}
			assert.True(t, recordlock.ProbeTableEmpty(l))
			assert.Zero(t, l.Stats().Acquired)
		})
	}
}

// Range locks are node-scoped: ScopeCluster is an *OptionError naming Scope, and the default scope
// is node scope even where a coordinator is set, which is never asked.
func TestLockRangeScope(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	coord := newTestCoord(clk, l.Timestamp)
	l.SetCoordinator(coord)
	ctx := context.Background()

	cluster := recordlock.Options{Scope: recordlock.ScopeCluster}
	_, err := l.LockRange(ctx, rng("a", "c"), cluster)
	require.ErrorIs(t, err, recordlock.ErrInvalidOptions)
	var oe *recordlock.OptionError
	require.True(t, errors.As(err, &oe))
	assert.Equal(t, "Scope", oe.Field)
	_, err = l.TryLockRange(rng("a", "c"), cluster)
	require.ErrorIs(t, err, recordlock.ErrInvalidOptions)
	txn := l.Begin()
	defer txn.Rollback()
	_, err = txn.LockRange(ctx, rng("a", "c"), cluster)
	require.ErrorIs(t, err, recordlock.ErrInvalidOptions)
	_, err = l.LockRange(ctx, rng("a", "c"), recordlock.Options{Scope: recordlock.Scope(9)})
	require.ErrorIs(t, err, recordlock.ErrInvalidOptions, "an unknown scope is refused as for a key")
	assert.True(t, recordlock.ProbeTableEmpty(l))

	h, err := l.LockRange(ctx, rng("a", "c"), recordlock.Options{})
	require.NoError(t, err)
	assert.Equal(t, recordlock.ScopeNode, h.Scope())
	th, err := txn.LockRange(ctx, rng("x", "z"), recordlock.Options{})
	require.NoError(t, err)
	assert.Equal(t, recordlock.ScopeNode, th.Scope())
	calls, _ := coord.counts()
	assert.Zero(t, calls, "the coordinator is never asked for a range")
	require.True(t, h.Release())
}

// Handle.Range is a copy of the range locked, whatever the caller does with its slices; Key is the
// range's Start; a key lock has no range.
func TestHandleRange(t *testing.T) {
	_, l := manual(t, openDB(t))
	ctx := context.Background()
	start, end := []byte("a"), []byte("c")
	h, err := l.LockRange(ctx, recordlock.Range{Start: start, End: end}, node)
	require.NoError(t, err)
	start[0], end[0] = 'x', 'y' // the caller reuses its slices
	r, ok := h.Range()
	require.True(t, ok)
	assert.Equal(t, rng("a", "c"), r)
	assert.Equal(t, []byte("a"), h.Key())
	r.Start[0], r.End[0] = 'q', 'q'
	again, _ := h.Range()
	assert.Equal(t, rng("a", "c"), again, "Range returns a copy")

	all, err := l.TryLockRange(recordlock.Prefix(nil), shared)
	require.ErrorIs(t, err, recordlock.ErrLocked, "the whole column family overlaps [a, c), held exclusively")
	assert.Nil(t, all)
	require.True(t, h.Release())
	all, err = l.LockRange(ctx, recordlock.Prefix(nil), shared)
	require.NoError(t, err)
	r, ok = all.Range()
	require.True(t, ok)
	assert.Nil(t, r.Start)
	assert.Nil(t, r.End, "no upper bound")
	assert.True(t, all.Shared())

	k, err := l.Lock(ctx, []byte("k"), shared)
	require.NoError(t, err)
	r, ok = k.Range()
	assert.False(t, ok)
	assert.Equal(t, recordlock.Range{}, r)
	require.True(t, k.Release())
	require.True(t, all.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A range conflicts with a key inside it unless both are shared; keys outside it, and ranges next
// to it, are free.
func TestTryLockRangeConflicts(t *testing.T) {
	_, _, l, other := lockerPair(t)
	x, err := other.TryLock([]byte("b"), node)
	require.NoError(t, err)

	_, err = l.TryLockRange(rng("a", "c"), node)
	require.ErrorIs(t, err, recordlock.ErrLocked, "an exclusive range over a held key")
	_, err = l.TryLockRange(rng("a", "c"), shared)
	require.ErrorIs(t, err, recordlock.ErrLocked, "a shared range over a key held exclusively")
	_, err = l.TryLockRange(rng("a", ""), node)
	require.ErrorIs(t, err, recordlock.ErrLocked, "an unbounded range over a held key")
	for _, free := range []recordlock.Range{rng("c", "d"), rng("a", "b"), rng("b\x00", "")} {
		h, err := l.TryLockRange(free, node)
		require.NoError(t, err, "%q", free)
		require.True(t, h.Release())
	}
	require.True(t, x.Release())

	s, err := other.TryLock([]byte("b"), shared)
	require.NoError(t, err)
	sr, err := l.TryLockRange(rng("a", "c"), shared)
	require.NoError(t, err, "shared range and shared key share b")
	_, err = l.TryLockRange(rng("b", "bb"), node)
	require.ErrorIs(t, err, recordlock.ErrLocked)
	_, err = other.TryLock([]byte("a"), node)
	require.ErrorIs(t, err, recordlock.ErrLocked, "a key inside a shared range, asked exclusive")
	require.True(t, s.Release())
	require.True(t, sr.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A key inside a held exclusive range waits for it and gets it once the range is released; a key
// outside it does not wait.
func TestKeyWaitsForExclusiveRange(t *testing.T) {
	_, _, l, other := lockerPair(t)
	ctx := context.Background()
	r, err := l.LockRange(ctx, rng("a", "c"), node)
	require.NoError(t, err)

	_, err = other.TryLock([]byte("b"), node)
	require.ErrorIs(t, err, recordlock.ErrLocked)
	c, err := other.TryLock([]byte("c"), node)
	require.NoError(t, err, "End is not in the range")
	b := lockAsync(ctx, other, []byte("b"), wait)
	waitingCount(t, l, 1)
	assert.True(t, pendingLock(b))

	require.True(t, r.Release())
	got := granted(t, b, "the key under the released range")
	require.True(t, got.Release())
	require.True(t, c.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Fairness: a queued exclusive range over [a, c) does not delay a request for x, which it does
// not conflict with, but a request for a key inside it queues behind it.
func TestQueuedRangeDelaysOnlyConflicts(t *testing.T) {
	_, _, l, other := lockerPair(t)
	ctx := context.Background()
	b, err := other.Lock(ctx, []byte("b"), node)
	require.NoError(t, err)
	r := lockRangeAsync(ctx, l, rng("a", "c"), wait)
	waitingCount(t, l, 1)

	x, err := other.TryLock([]byte("x"), node)
	require.NoError(t, err, "x does not conflict with the queued range")
	_, err = other.TryLock([]byte("a"), node)
	require.ErrorIs(t, err, recordlock.ErrLocked, "a is free, but the range queued first wants it")
	require.True(t, x.Release())

	require.True(t, b.Release())
	h := granted(t, r, "the range")
	require.True(t, h.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A range lock's Timeout, ctx and lease work as a key's, on the Locker's clock: a waiting range
// times out or is cancelled leaving nothing behind, and a held range's lease lapses and frees its
// keys for a waiter.
func TestLockRangeTimeoutCancelLease(t *testing.T) {
	_, clk, l, other := lockerPair(t)
	ctx := context.Background()
	k, err := other.Lock(ctx, []byte("b"), recordlock.Options{Scope: recordlock.ScopeNode, Lease: time.Second})
	require.NoError(t, err)

	res := lockRangeAsync(ctx, l, rng("a", "c"), recordlock.Options{Scope: recordlock.ScopeNode, Timeout: 50 * time.Millisecond})
	waitingCount(t, l, 1)
	clk.Advance(50 * time.Millisecond)
	r := testutil.Await(t, res, "the timed-out range")
	require.ErrorIs(t, r.err, recordlock.ErrTimeout)

	cctx, cancel := context.WithCancel(ctx)
	res = lockRangeAsync(cctx, l, rng("a", "c"), wait)
	waitingCount(t, l, 1)
	cancel()
	r = testutil.Await(t, res, "the cancelled range")
	require.ErrorIs(t, r.err, context.Canceled)
	waitingCount(t, l, 0)

	res = lockRangeAsync(ctx, l, rng("a", "c"), recordlock.Options{Scope: recordlock.ScopeNode, Lease: recordlock.MinLease, Timeout: time.Minute})
	waitingCount(t, l, 1)
	clk.Advance(time.Second) // b's lease lapses: the range gets its keys
	h := granted(t, res, "the range after b's lease")
	assert.True(t, k.IsLeaseExpired())
	kb := lockAsync(ctx, other, []byte("b"), wait)
	waitingCount(t, l, 1)
	clk.Advance(recordlock.MinLease) // the range's lease lapses: b is free
	got := granted(t, kb, "b after the range's lease")
	assert.True(t, h.IsLeaseExpired())
	assert.False(t, h.Release())
	require.True(t, got.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Two Lockers of one database exclude each other's ranges as their keys; a Locker's Close
// releases its ranges.
func TestLockRangeCloseReleases(t *testing.T) {
	_, _, l, other := lockerPair(t)
	h, err := l.LockRange(context.Background(), rng("a", "c"), node)
	require.NoError(t, err)
	_, err = other.TryLockRange(rng("b", "d"), shared)
	require.ErrorIs(t, err, recordlock.ErrLocked)
	require.NoError(t, l.Close())
	assert.True(t, h.IsExpired())
	o, err := other.TryLockRange(rng("b", "d"), node)
	require.NoError(t, err)
	require.True(t, o.Release())
	_, err = l.TryLockRange(rng("a", "c"), node)
	require.ErrorIs(t, err, recordlock.ErrClosed)
}

// WithoutRangeConflicts turns the range conflict check off, for the phantom test to show it
// catches its absence: a range is then granted over a held key.
func TestWithoutRangeConflicts(t *testing.T) {
	db := openDB(t)
	l := newLocker(t, db, recordlock.WithoutRangeConflicts())
	k, err := l.TryLock([]byte("b"), node)
	require.NoError(t, err)
	h, err := l.TryLockRange(rng("a", "c"), node)
	require.NoError(t, err, "the check is off")
	require.True(t, h.Release())
	require.True(t, k.Release())
}

// A range handle is a Handle in every respect: Renew moves its lease, a joined round's release
// hook fires once when it ends, RevokeLease frees its keys and fences it, and its version stamps
// count from AcquiredAt.
func TestRangeHandleLeaseOperations(t *testing.T) {
	_, clk, l, other := lockerPair(t)
	ctx := context.Background()
	opts := recordlock.Options{Scope: recordlock.ScopeNode, Lease: time.Second}
	h, err := l.LockRange(ctx, rng("a", "c"), opts)
	require.NoError(t, err)
	v := h.NextHolderVersion()
	assert.Equal(t, h.AcquiredAt(), v)
	assert.Greater(t, h.NextHolderVersion(), v)

	clk.Advance(900 * time.Millisecond)
	require.NoError(t, h.Renew(time.Second))
	clk.Advance(900 * time.Millisecond)
	assert.False(t, h.IsExpired(), "renewed")
	var hooks hookCounter
	joinHook(t, h, clk, time.Second, hooks.hook)
	require.NoError(t, h.Fence(func() error { return nil }))

	h.RevokeLease()
	assert.True(t, h.IsLeaseExpired())
	assert.True(t, doneClosed(h))
	assert.Equal(t, 1, hooks.count())
	require.ErrorIs(t, h.Fence(func() error { return nil }), recordlock.ErrLeaseExpired)
	b, err := other.TryLock([]byte("b"), node)
	require.NoError(t, err, "a revoked range frees its keys")
	require.True(t, b.Release())
	h.RevokeLease()
	assert.False(t, h.Release())
	assert.Equal(t, 1, hooks.count(), "the hook fires once")

	held, err := l.LockRange(ctx, rng("a", "c"), recordlock.Options{Scope: recordlock.ScopeNode, Lease: time.Second, Hold: true})
	require.NoError(t, err)
	assert.True(t, held.Hold())
	clk.Advance(time.Second)
	assert.True(t, held.IsLeaseExpired(), "a held range's lease lapses too")
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// doneClosed reports whether h's Done channel is closed.
func doneClosed(h *recordlock.Handle) bool { return testutil.Closed(h.Done()) }
