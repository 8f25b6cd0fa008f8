package locktable

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// indexedKeys is the keys of sp's index of keys, in order, and how many of them are orphans.
func indexedKeys(sp *rangeSpace) (keys []string, orphans int) {
	sp.home.mu.Lock()
	defer sp.home.mu.Unlock()
	return keysLocked(sp), len(sp.orphans)
}

// lockSharedRange is a locker on a table of its own, a shared range lock of it over [a, z), and the
// range space of its column family.
func lockSharedRange(t *testing.T) (*testLocker, *Claim, *rangeSpace) {
	t.Helper()
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
	r, err := l.TryLockRange("a", "z", testOptions{Shared: true})
	require.NoError(t, err)
	return l, r, tab.spaceOf(0)
}

// orphansOf is how many orphans sp lists, whether it let go of their map, and whether its cover
// has no retiring span.
func orphansOf(sp *rangeSpace) (n int, mapLetGo, noneRetiring bool) {
	sp.home.mu.Lock()
	defer sp.home.mu.Unlock()
	return len(sp.orphans), sp.orphans == nil, sp.cover.Load().retiring.Empty()
}

// keysLocked is the keys of sp's index in order, read with the home shard's mutex held.
func keysLocked(sp *rangeSpace) []string {
	var keys []string
	sp.keys.Ascend(func(e *keyEntry) bool {
		if e.space != sp {
			keys = append(keys, "(an entry out of the table)")
			return true
		}
		keys = append(keys, string(e.homeKey()))
		return true
	})
	return keys
}

// A key under a range is in its space's index of keys for exactly as long as it is held or waited
// on: it leaves the index as its entry leaves the table, an orphan leaves its retired span then,
// and a key taken again comes back in.
func TestHomeEntryLeavesTheSpaceIndexWithTheTable(t *testing.T) {
	l, r, sp := lockSharedRange(t)
	ctx := context.Background()
	shared := testOptions{Shared: true}
	b, err := l.Lock(ctx, []byte("b"), shared)
	require.NoError(t, err)
	c, err := l.Lock(ctx, []byte("c"), shared)
	require.NoError(t, err)
	keys, _ := indexedKeys(sp)
	assert.Equal(t, []string{"b", "c"}, keys)

	require.True(t, b.Release())
	keys, _ = indexedKeys(sp)
	require.Equal(t, []string{"c"}, keys, "a key given back leaves the index with the table")

	require.True(t, r.Release())
	keys, orphans := indexedKeys(sp)
	assert.Equal(t, []string{"c"}, keys, "a key held as its range ends stays, an orphan")
	assert.Equal(t, 1, orphans)
	require.True(t, c.Release())
	keys, orphans = indexedKeys(sp)
	require.Empty(t, keys, "the orphan left the index with the table")
	require.Zero(t, orphans)
	_, mapLetGo, noneRetiring := orphansOf(sp)
	assert.True(t, noneRetiring, "its retired span went with its last orphan")
	assert.True(t, mapLetGo, "the map the orphans grew is let go")

	r, err = l.TryLockRange("a", "z", shared)
	require.NoError(t, err)
	b, err = l.Lock(ctx, []byte("b"), shared)
	require.NoError(t, err)
	keys, _ = indexedKeys(sp)
	assert.Equal(t, []string{"b"}, keys, "a key taken again comes back in")
	require.True(t, b.Release())
	require.True(t, r.Release())
}

// A search whose callback searches again (rangeBlocked → passes → waitsForOwner →
// conflictsWithLocksOf → keysIn, for a range request queued ahead) keeps its own bounds: the
// inner search takes probes of its own, and gives them back. Once searches have run, a search
// allocates nothing, and a probe given back keeps no key alive.
func TestNestedKeySearchesKeepTheirOwnBounds(t *testing.T) {
	l, r, sp := lockSharedRange(t)
	ctx := context.Background()
	shared := testOptions{Shared: true}
	want := []string{"b", "c", "d", "e", "f", "g"}
	var hs []*Claim
	for _, k := range want {
		h, err := l.Lock(ctx, []byte(k), shared)
		require.NoError(t, err)
		hs = append(hs, h)
	}

	sp.home.mu.Lock()
	require.Equal(t, want, keysLocked(sp))
	var outer, inner []string
	sp.keysIn([]byte("b"), []byte("g"), func(e *keyEntry) bool {
		outer = append(outer, string(e.homeKey()))
		sp.keysIn([]byte("c"), []byte("d"), func(e *keyEntry) bool {
			inner = append(inner, string(e.homeKey()))
			sp.keysIn([]byte("a"), nil, func(*keyEntry) bool { return true }) // one level more, unbounded
			return true
		})
		return true
	})
	probes := len(sp.probes)
	for i, p := range sp.probes {
		assert.Nil(t, p.keyClaim.keyPtr, "probe %d given back keeps no key", i)
		assert.Zero(t, p.keyClaim.keyLen, "probe %d", i)
	}
	n := 0
	from, to := []byte("b"), []byte("g") // keys of claims in the table: made once
	count := func(*keyEntry) bool { n++; return true }
	allocs := testing.AllocsPerRun(20, func() { sp.keysIn(from, to, count) })
	sp.home.mu.Unlock()

	assert.Equal(t, []string{"b", "c", "d", "e", "f"}, outer, "the outer search keeps its end after an inner one")
	assert.Equal(t, []string{"c", "c", "c", "c", "c"}, inner)
	assert.Equal(t, 5, probes, "two probes per bounded search and one per unbounded, three levels deep, all back")
	assert.Zero(t, allocs, "a search allocates nothing once searches have run")
	for _, h := range hs {
		require.True(t, h.Release())
	}
	require.True(t, r.Release())
}

// A key whose holder gave it back while its oldest waiter was woken but had not run is free with
// a queue: a range that brings it in keeps a claim of the key from its queue (moveEntry's
// keyClaim), the entry becomes an orphan as the range request fails, and it leaves the index
// and its retired span as the waiter, granted in the home shard, gives the key back.
func TestFreeKeyWithAQueueBroughtInThenOrphaned(t *testing.T) {
	tab := newTestTable(t)
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, tab, clk)
	ctx := context.Background()
	// The space exists before the key is taken, so that its key shard notes the key and the range
	// request brings it in.
	r0, err := l.TryLockRange("x", "y", testOptions{})
	require.NoError(t, err)
	sp := tab.spaceOf(0)
	key := []byte("k")
	a, err := l.TryLock(key, testOptions{})
	require.NoError(t, err)
	require.Equal(t, naturalShard(tab, key), tab.ShardOf(0, key))
	got := lockAsync(ctx, l, key, testOptions{Timeout: time.Minute})
	WaitQueued(t, l, key, 1)
	w := releaseWokenNotRun(t, a)

	_, err = l.TryLockRange("a", "z", testOptions{})
	require.ErrorIs(t, err, ErrLocked, "the queued request for k is ahead of the range request")
	require.Equal(t, int(sp.homeIdx), tab.ShardOf(0, key), "the range request brought k in")
	sp.home.mu.Lock()
	require.Equal(t, []string{"k"}, keysLocked(sp))
	require.Len(t, sp.orphans, 1, "no live span covers k once the range request failed")
	var e *keyEntry
	for x := range sp.orphans {
		e = x
	}
	require.Nil(t, e.holder)
	require.Same(t, w.h, e.keyClaim, "the free key's claim is its oldest waiter's")
	sp.home.mu.Unlock()

	w.signal()
	b := testutil.Await(t, got, "the woken waiter's grant")
	require.NoError(t, b.err)
	require.True(t, b.h.Release())
	keys, _ := indexedKeys(sp)
	assert.Empty(t, keys)
	_, mapLetGo, noneRetiring := orphansOf(sp)
	assert.True(t, mapLetGo)
	assert.True(t, noneRetiring)
	require.True(t, r0.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// A key held when its range ended is an orphan; a range that covers it again makes it no orphan
// (coverAdd), and its retired span leaves the cover then, not when the key leaves the table.
func TestOrphanCoveredAgainLeavesItsRetiredSpan(t *testing.T) {
	l, r, sp := lockSharedRange(t)
	ctx := context.Background()
	shared := testOptions{Shared: true}
	k, err := l.Lock(ctx, []byte("k"), shared)
	require.NoError(t, err)
	require.True(t, r.Release())
	orphans, _, noneRetiring := orphansOf(sp)
	require.Equal(t, 1, orphans)
	require.False(t, noneRetiring)

	r2, err := l.TryLockRange("j", "l", shared)
	require.NoError(t, err)
	_, mapLetGo, noneRetiring := orphansOf(sp)
	assert.True(t, mapLetGo, "a live span covers k again")
	assert.True(t, noneRetiring, "the retired span went with its last orphan")
	require.True(t, r2.Release())
	orphans, _, _ = orphansOf(sp)
	assert.Equal(t, 1, orphans, "k is an orphan of the second range now")
	require.True(t, k.Release())
	_, mapLetGo, noneRetiring = orphansOf(sp)
	assert.True(t, mapLetGo)
	assert.True(t, noneRetiring)
	assert.True(t, ProbeTableEmpty(l))
}

// An entry of a home shard keeps a claim of its key to be found by in its space's index
// (keyClaim), but not one given back while others go on holding the key (rekey): that claim, and
// through a Locker's handle its closed Locker, would stay reachable for as long as the key is
// held. Both ways into the home shard: an entry made under the range and one brought in by it.
func TestHomeEntryLetsGoOfAClaimGivenBack(t *testing.T) {
	for _, broughtIn := range []bool{false, true} {
		name := "made under the range"
		if broughtIn {
			name = "brought in by the range"
		}
		t.Run(name, func(t *testing.T) {
			tab := newTestTable(t)
			clk := NewManualClock(time.Unix(1, 0))
			closing, err := newLocker(tab, clk) // closed below, and not kept by a cleanup
			require.NoError(t, err)
			other := newTestLocker(t, tab, clk)
			ctx := context.Background()
			shared := testOptions{Shared: true}
			r0, err := other.TryLockRange("x", "y", shared) // the space exists: keys are noted
			require.NoError(t, err)
			key := []byte("a key longer than nineteen bytes, so not inside the claim")
			var r *Claim
			if !broughtIn {
				r, err = other.TryLockRange("a", "w", shared)
				require.NoError(t, err)
			}
			first, err := closing.Lock(ctx, key, shared)
			require.NoError(t, err)
			second, err := other.Lock(ctx, key, shared)
			require.NoError(t, err)
			if broughtIn {
				require.Equal(t, naturalShard(tab, key), tab.ShardOf(0, key))
				r, err = other.TryLockRange("a", "w", shared)
				require.NoError(t, err)
			}
			require.Equal(t, int(homeOf(0)), tab.ShardOf(0, key))
			gone, tenant := weak.Make(first), weak.Make(closing)
			require.True(t, first.Release())
			first = nil
			require.NoError(t, closing.Close())
			closing = nil
			runtime.GC()
			runtime.GC()
			pinned, tenantPinned := gone.Value() != nil, tenant.Value() != nil
			assert.False(t, pinned, "the entry lets go of the claim given back while another holds its key")
			assert.False(t, tenantPinned, "and so of its closed tenant")

			last := weak.Make(second)
			require.True(t, second.Release())
			second = nil
			runtime.GC()
			runtime.GC()
			assert.Nil(t, last.Value(), "an entry kept for reuse once its key left keeps no claim of it")
			require.True(t, r.Release())
			require.True(t, r0.Release())
		})
	}
}

// A nested search through the engine: a range request of an owner that holds a lock reads the keys
// inside its range (rangeBlocked), and a key's request queued there behind a range request that
// waits for the owner is passed (rangepass.go); finding that out reads the keys of that range
// request (conflictsWithLocksOf), a search inside the first. The first must still read the keys
// after the inner search's end: a key there held exclusively by another keeps the range request
// waiting.
func TestRangeRequestReadsItsKeysPastANestedSearch(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
	ctx := context.Background()
	o := &testTxn{l: l, name: "o"}
	a0, err := l.acquire(ctx, []byte("a0"), testOptions{Shared: true}, o, true)
	require.NoError(t, err)
	x, err := l.Lock(ctx, []byte("b"), testOptions{Shared: true})
	require.NoError(t, err)
	z, err := l.Lock(ctx, []byte("y"), testOptions{})
	require.NoError(t, err)
	yReq := rangeAsync(l, "a0", "c", testOptions{}, nil) // waits for a0 (o's) and b
	waitRangesQueued(t, l, 1)
	wReq := lockAsync(ctx, l, []byte("b"), testOptions{}) // behind x's share and the range request
	WaitQueued(t, l, []byte("b"), 1)

	_, err = l.acquireRange(ctx, []byte("ab"), []byte("z"), testOptions{Shared: true, OwnerHolds: true}, o, false)
	require.ErrorIs(t, err, ErrLocked, "y, inside [ab, z), is held exclusively by another")

	require.True(t, z.Release())
	require.True(t, x.Release())
	require.True(t, a0.Release())
	yr := testutil.Await(t, yReq, "the range request")
	require.NoError(t, yr.err)
	require.True(t, yr.h.Release())
	w := testutil.Await(t, wReq, "the key request")
	require.NoError(t, w.err)
	require.True(t, w.h.Release())
	assert.True(t, ProbeTableEmpty(l))
}
