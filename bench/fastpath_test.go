package bench

// Behaviour tests of the mechanisms the fast path introduced in the core: the hand-written
// deadline heap behind each shard's timer, the per-Locker cache of resolved Options, and the
// system clock's wall reading derived from the monotonic clock. They go through the public API
// only, and assert behaviour, never timing.

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// closed reports whether c is closed, without blocking.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestTimersExpireStalledHoldersInDeadlineOrder takes 300 keys with leases in shuffled order, so
// that every shard's heap sees deadlines arrive earlier and later than its head, and removes a
// third of them early. Then it moves the clock one step at a time: at each step exactly the
// leases that have lapsed must have ended, by the shard timers alone (nothing else is called on
// the handles).
func TestTimersExpireStalledHoldersInDeadlineOrder(t *testing.T) {
	fx.open(t)
	clk := recordlock.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	l, err := recordlock.New(fx.db, recordlock.WithClock(clk))
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Close()) }()

	const n, steps = 300, 50
	step := 100 * time.Millisecond
	rng := rand.New(rand.NewPCG(1, 2))
	type held struct {
		h        *recordlock.Handle
		done     <-chan struct{}
		lease    time.Duration
		released bool
	}
	hs := make([]held, n)
	for i, p := range rng.Perm(n) {
		lease := recordlock.MinLease + time.Duration(p%steps)*step
		h, err := l.TryLock(recordKey(nil, i), recordlock.Options{Lease: lease, Scope: recordlock.ScopeNode})
		require.NoError(t, err)
		hs[i] = held{h: h, done: h.Done(), lease: lease}
	}
	for i := 0; i < n; i += 3 {
		require.True(t, hs[i].h.Release())
		hs[i].released = true
	}

	checked := 0
	for elapsed := time.Duration(0); elapsed <= recordlock.MinLease+steps*step; elapsed += step {
		for i, x := range hs {
			if x.released {
				continue
			}
			assert.Equal(t, elapsed >= x.lease, closed(x.done), "key %d, lease %v, at %v", i, x.lease, elapsed)
			checked++
		}
		clk.Advance(step)
	}
	assert.Greater(t, checked, n*steps/2)
	for i, x := range hs {
		assert.True(t, closed(x.done), "key %d", i)
		assert.False(t, x.h.Release(), "key %d: released before, or its lease lapsed", i)
	}
	for i := range n {
		h, err := l.TryLock(recordKey(nil, i), recordlock.Options{Scope: recordlock.ScopeNode})
		require.NoError(t, err, "key %d is free again", i)
		require.True(t, h.Release())
	}
}

// TestEarlierDeadlineRearmsTheShardTimer holds a key with a long lease, then, on many other keys
// (some in the same shard), shorter ones each with a waiter; each waiter must get its key when
// its holder's lease lapses, without waiting for the long lease.
func TestEarlierDeadlineRearmsTheShardTimer(t *testing.T) {
	fx.open(t)
	clk := recordlock.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	l, err := recordlock.New(fx.db, recordlock.WithClock(clk))
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Close()) }()

	long, err := l.TryLock([]byte("long"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	const n = 200 // more keys than shards: several share the long lease's shard
	got := make(chan int, n)
	for i := range n {
		_, err := l.TryLock(recordKey(nil, i), recordlock.Options{Lease: time.Second})
		require.NoError(t, err)
		go func() {
			h, err := l.Lock(context.Background(), recordKey(nil, i), recordlock.Options{Timeout: time.Minute})
			if assert.NoError(t, err) {
				got <- i
				h.Release()
			}
		}()
	}
	// The waiters cannot be observed queueing from outside; a waiter that arrives after the
	// deadline finds the lapsed key free at once, which passes too, so give them real time.
	time.Sleep(100 * time.Millisecond)
	clk.Advance(time.Second)
	seen := map[int]bool{}
	for range n {
		select {
		case i := <-got:
			seen[i] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d waiters still wait after their holders' leases lapsed", n-len(seen), n)
		}
	}
	assert.Len(t, seen, n)
	assert.False(t, long.IsExpired(), "the long lease is untouched")
	require.True(t, long.Release())
}

// TestOptionsCacheResolvesEachOptionsAlike locks with more distinct Options than the cache holds,
// valid and invalid, several times each, and checks every lock gets its own lease and hold, and
// every invalid one is rejected every time.
func TestOptionsCacheResolvesEachOptionsAlike(t *testing.T) {
	fx.open(t)
	clk := recordlock.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	l, err := recordlock.New(fx.db, recordlock.WithClock(clk))
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Close()) }()

	valid := []recordlock.Options{
		{},
		{Lease: time.Second},
		{Lease: 2 * time.Second, Hold: true},
		{Lease: 3 * time.Second, Scope: recordlock.ScopeNode},
		{Lease: 4 * time.Second, Timeout: time.Second},
		{Lease: 5 * time.Second, Hold: true, Scope: recordlock.ScopeNode},
		{Timeout: time.Minute},
	}
	invalid := []recordlock.Options{
		{Lease: time.Millisecond},
		{Timeout: -time.Second},
		{Scope: recordlock.Scope(9)},
	}
	for round := range 3 {
		for i, o := range valid {
			h, err := l.TryLock(recordKey(nil, i), o)
			require.NoError(t, err, "round %d, options %+v", round, o)
			want := o.Lease
			if want == 0 {
				want = recordlock.DefaultLease
			}
			assert.Equal(t, clk.Now().Add(want).UnixNano(), h.ExpiresAt().UnixNano(), "round %d, options %+v", round, o)
			assert.Equal(t, o.Hold, h.Hold(), "round %d, options %+v", round, o)
			require.True(t, h.Release())
		}
		for _, o := range invalid {
			_, err := l.TryLock([]byte("k"), o)
			require.ErrorIs(t, err, recordlock.ErrInvalidOptions, "round %d, options %+v", round, o)
		}
		_, err := l.TryLock(nil, valid[0])
		require.ErrorIs(t, err, recordlock.ErrInvalidKey, "a cached Options does not skip the key check")
	}
}

// TestSystemClockLockReadsTheWallClock checks, on the system clock, that a lock's AcquiredAt and
// ExpiresAt are wall readings taken between the calls around Lock, although Lock now derives
// the wall reading from the monotonic clock.
func TestSystemClockLockReadsTheWallClock(t *testing.T) {
	l := newLocker(t)
	lease := 10 * time.Second
	for i := range 50 {
		before := time.Now()
		h, err := l.TryLock(recordKey(nil, i), recordlock.Options{Lease: lease, Scope: recordlock.ScopeNode})
		require.NoError(t, err)
		after := time.Now()
		at := h.AcquiredAt().Time()
		assert.False(t, at.Before(before.Add(-time.Microsecond)), "AcquiredAt %v is before the call at %v", at, before)
		assert.False(t, at.After(after.Add(time.Microsecond)), "AcquiredAt %v is after the call at %v", at, after)
		exp := h.ExpiresAt()
		assert.False(t, exp.Before(before.Add(lease-time.Microsecond)), "ExpiresAt %v < %v + lease", exp, before)
		assert.False(t, exp.After(after.Add(lease+time.Microsecond)), "ExpiresAt %v > %v + lease", exp, after)
		require.True(t, h.Release())
		if i%10 == 9 {
			time.Sleep(2 * time.Millisecond) // let the clock sample its offset again
		}
	}
}
