package locktable

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// naturalShard is the shard the record (0, key) hashes to, where it stays unless a range brings
// it into the home shard.
func naturalShard(tab *Table, key []byte) int { return int(tab.hash(0, key) & (2*KeyShards - 1)) }

// Keys that no range covers stay in their own shards while ranges are held in their column
// family; the keys a range covers are in the home shard while it lasts, and go back to their own
// shards as they leave the table once it ended.
func TestOnlyTheKeysRangesCoverGoToTheHomeShard(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
	r, err := l.TryLockRange("m", "n", testOptions{Shared: true})
	require.NoError(t, err)
	home := int(tab.spaceOf(0).homeIdx)
	var outside, inside []*Claim
	spread := map[int]bool{}
	for i := range 256 {
		k := []byte(fmt.Sprintf("a%03d", i))
		h, err := l.TryLock(k, testOptions{})
		require.NoError(t, err)
		outside = append(outside, h)
		assert.Equal(t, naturalShard(tab, k), tab.ShardOf(0, k), "a key no range covers stays in its own shard")
		spread[tab.ShardOf(0, k)] = true
		k = []byte(fmt.Sprintf("m%03d", i))
		h, err = l.TryLock(k, testOptions{Shared: true})
		require.NoError(t, err)
		inside = append(inside, h)
		assert.Equal(t, home, tab.ShardOf(0, k), "a key a range covers is in the home shard")
	}
	assert.Greater(t, len(spread), KeyShards/2, "the keys outside the range are spread over the shards")

	require.True(t, r.Release())
	k := []byte("m000")
	assert.Equal(t, home, tab.ShardOf(0, k), "a key held when its range ended stays in the home shard while held")
	require.True(t, inside[0].Release())
	h, err := l.TryLock(k, testOptions{})
	require.NoError(t, err)
	assert.Equal(t, naturalShard(tab, k), tab.ShardOf(0, k), "once it left the table it is taken in its own shard")
	require.True(t, h.Release())
	for _, h := range append(outside, inside[1:]...) {
		require.True(t, h.Release())
	}
	assert.True(t, tab.spaceOf(0).cover.Load().retiring.Empty(), "no key is left in the home shard without a range")
	assert.True(t, ProbeTableEmpty(l))
}

// A range request visits the shards one at a time, holding none while it waits for one: while
// one shard's mutex is held elsewhere and the request waits for it, every other shard takes and
// gives back keys.
func TestFirstRangeStopsNoShardButTheOneItVisits(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
	busy := uint64(KeyShards / 2)
	tab.shards[busy].mu.Lock()
	done := make(chan error, 1)
	go func() {
		r, err := l.TryLockRange("k", "l", testOptions{})
		if err == nil {
			r.Release()
		}
		done <- err
	}()
	// Keys in every shard but the busy one are taken and given back while the range request waits
	// for the busy shard's mutex (or before it got that far).
	taken := 0
	for i := 0; taken < 4*KeyShards; i++ {
		k := []byte(fmt.Sprintf("x%05d", i))
		if uint64(naturalShard(tab, k)) == busy {
			continue
		}
		h, err := l.TryLock(k, testOptions{})
		require.NoError(t, err)
		require.True(t, h.Release())
		taken++
	}
	select {
	case err := <-done:
		t.Fatalf("the range request ended (%v) while a shard it must visit was busy", err)
	default:
	}
	tab.shards[busy].mu.Unlock()
	require.NoError(t, testutil.Await(t, done, "the range request"))
	assert.True(t, ProbeTableEmpty(l))
}

// An owner's request that waits, in a column family with a range space, waits in the home shard,
// where the requests that may pass it through its wait see it (rangepass.go).
func TestOwnersWaitInTheHomeShard(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
	r, err := l.TryLockRange("m", "n", testOptions{})
	require.NoError(t, err)
	k := []byte("a")
	h, err := l.TryLock(k, testOptions{})
	require.NoError(t, err)
	require.Equal(t, naturalShard(tab, k), tab.ShardOf(0, k))
	txn := l.Begin()
	ch := make(chan error, 1)
	go func() {
		_, err := txn.Lock(context.Background(), k, testOptions{})
		ch <- err
	}()
	WaitQueued(t, l, k, 1)
	assert.Equal(t, int(homeOf(0)), tab.ShardOf(0, k), "the owner's wait brought the key into the home shard")
	require.True(t, h.Release())
	require.NoError(t, testutil.Await(t, ch, "the owner's request"))
	txn.Rollback()
	require.True(t, r.Release())
	assert.True(t, tab.spaceOf(0).cover.Load().retiring.Empty())
	assert.True(t, ProbeTableEmpty(l))
}

// A key request that comes after a range request published its span, in a key shard the range
// request has visited already, finds the span in the cover and is taken in the home shard, where
// the range request, once it has visited every shard, sees it. Taken in its own shard instead, it
// would be behind the range request's visit, and both would hold the key.
func TestKeyRequestBehindARangesVisitGoesToTheHomeShard(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
	last := &tab.shards[KeyShards-1] // the range request visits it after every other key shard
	var k []byte
	for i := 0; k == nil; i++ {
		if c := []byte(fmt.Sprintf("k%03d", i)); naturalShard(tab, c) != KeyShards-1 {
			k = c
		}
	}
	first, err := l.TryLockRange("a", "b", testOptions{}) // makes the range space, which visits every shard
	require.NoError(t, err)
	require.True(t, first.Release())
	// A key taken in the last shard once the space is made has it noted, so that range requests
	// visit it (keyorder.go).
	for i := 0; ; i++ {
		if c := []byte(fmt.Sprintf("x%03d", i)); naturalShard(tab, c) == KeyShards-1 {
			x, err := l.TryLock(c, testOptions{})
			require.NoError(t, err)
			require.True(t, x.Release())
			break
		}
	}
	last.mu.Lock()
	ranged := make(chan error, 1)
	go func() {
		r, err := l.TryLockRange("k", "l", testOptions{})
		if err == nil {
			r.Release()
		}
		ranged <- err
	}()
	sp := tab.spaceOf(0)
	require.Eventually(t, func() bool { return !sp.cover.Load().live.Empty() },
		5*time.Second, 100*time.Microsecond, "the range request publishes its span")
	h, err := l.TryLock(k, testOptions{})
	require.NoError(t, err, "the range request is not placed yet")
	assert.Equal(t, int(homeOf(0)), tab.ShardOf(0, k), "the cover sent the key to the home shard")
	last.mu.Unlock()
	assert.ErrorIs(t, testutil.Await(t, ranged, "the range request"), ErrLocked, "the range request sees the key")
	require.True(t, h.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// A range request inside the span of one whose keys are still on their way into the home shard
// brings in its keys itself: skipping that, it would be placed while a key inside it is held in
// a key shard that neither has visited yet.
func TestRangeInsideARangeStillBringingInBringsItsOwnKeys(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
	first, err := l.TryLockRange("a", "b", testOptions{}) // makes the range space, which visits every shard
	require.NoError(t, err)
	require.True(t, first.Release())
	last := &tab.shards[KeyShards-1]
	var k []byte
	for i := 0; k == nil; i++ {
		if c := []byte(fmt.Sprintf("k%03d", i)); naturalShard(tab, c) == KeyShards-1 {
			k = c
		}
	}
	h, err := l.TryLock(k, testOptions{})
	require.NoError(t, err)
	last.mu.Lock()
	outer := make(chan error, 1)
	go func() {
		r, err := l.TryLockRange("k", "l", testOptions{})
		if err == nil {
			r.Release()
		}
		outer <- err
	}()
	sp := tab.spaceOf(0)
	require.Eventually(t, func() bool { return !sp.cover.Load().live.Empty() },
		5*time.Second, 100*time.Microsecond, "the outer range request publishes its span")
	inner := make(chan error, 1)
	go func() {
		r, err := l.TryLockRange(string(k), string(k)+"\x00", testOptions{Shared: true})
		if err == nil {
			r.Release()
		}
		inner <- err
	}()
	var early error
	select {
	case err := <-inner:
		early = fmt.Errorf("the inner range request ended (%v) while a key inside it was still on its way", err)
	case <-time.After(50 * time.Millisecond):
	}
	last.mu.Unlock()
	if early != nil {
		t.Fatal(early)
	}
	assert.ErrorIs(t, testutil.Await(t, inner, "the inner range request"), ErrLocked, "the inner range sees the key held inside it")
	assert.ErrorIs(t, testutil.Await(t, outer, "the outer range request"), ErrLocked)
	require.True(t, h.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// A key request that read the cover before a range request published its span, in a shard where
// nothing was noted yet, is not passed by that range request: the range request waits for the
// shard's mutex, finds the key the request made, and does not take its range over it. The key
// request is Acquire, stopped inside its read of the cover (rangeHooks.coverRead), with its
// shard's mutex held, while the range request runs; a shared key under an exclusive range here,
// the other mode of TestKeyRequestBetweenCoverReadAndEntryHoldsOffARange's.
func TestRangeRequestWaitsForAKeyRequestThatReadTheCover(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
	other, err := l.TryLockRange("x", "y", testOptions{}) // makes the column family's range space
	require.NoError(t, err)
	require.True(t, other.Release())
	sp := tab.spaceOf(0)

	key := []byte("k1")
	sh := tab.shard(tab.hash(0, key))
	require.False(t, sh.order.noted.Load(), "the key's shard has had nothing noted")
	h := l.newClaim(key, testOptions{Shared: true}, nil)
	ranged := make(chan error, 1)
	covered, passed := true, false
	tab.ranges.hooks.coverRead = func() {
		tab.ranges.hooks.coverRead = nil
		covered = sp.cover.Load().live.Covers(key)
		go func() {
			r, err := l.TryLockRange("k", "l", testOptions{})
			if err == nil {
				r.Release()
			}
			ranged <- err
		}()
		passed = !testutil.NotReturned(ranged)
	}
	_, err = h.Acquire(context.Background(), defaultLease, defaultTimeout, false, false)
	require.False(t, covered, "no span covers the key yet")
	if passed {
		t.Fatal("the range request passed the shard of a key request that had read the cover: the key it makes is missed")
	}
	require.NoError(t, err, "the key request, granted once the cover was read")
	require.ErrorIs(t, testutil.Await(t, ranged, "the range request"), ErrLocked, "the exclusive range over a key held shared")
	require.True(t, h.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// A column family's first range request notes the entries its key shards made before it, a
// batch at a time, and no entry is passed by because others' keys leave between two batches. Key
// x2 sits in the first slot past the first batch of its shard's index, in the probe run of x1,
// which sits in the last slot of that batch; between the two batches x1 is released, and the
// index shifts x2 back into x1's slot, which the first batch has looked at already. A range over
// x2 must still find it held.
func TestFirstRangeNotesAKeyShiftedBackBetweenBatches(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
	const shardIdx, fill, slots = 0, 800, 2048 // 800 entries: an index of 2,048 slots
	last := broughtScan - 1                    // the first batch's last slot
	home := func(k []byte) int { return int(tab.hash(0, k)>>hashShift) & (slots - 1) }
	var held []*Claim
	var x1, x2 []byte
	for i := 0; len(held) < fill || x2 == nil; i++ {
		k := []byte(fmt.Sprintf("k%08d", i))
		if naturalShard(tab, k) != shardIdx {
			continue
		}
		switch h := home(k); {
		case h == last && x1 == nil:
			x1 = k
		case h == last:
			x2 = k
		case h < last-64 || h > last+64: // keeps the slots about the boundary free for x1 and x2
			if len(held) < fill {
				c, err := l.TryLock(k, testOptions{})
				require.NoError(t, err)
				held = append(held, c)
			}
		}
	}
	sh := &tab.shards[shardIdx]
	require.Len(t, sh.index.slots, slots)
	h1, err := l.TryLock(x1, testOptions{})
	require.NoError(t, err)
	h2, err := l.TryLock(x2, testOptions{})
	require.NoError(t, err)
	require.Same(t, h1.e, sh.index.slots[last], "x1 in the first batch's last slot")
	require.Same(t, h2.e, sh.index.slots[last+1], "x2 in the next slot, past the first batch")

	released, shifted := false, false
	tab.ranges.hooks.betweenBatches = func() {
		if !released {
			released = true
			require.True(t, h1.Release())
			sh.mu.Lock()
			shifted = sh.index.slots[last] == h2.e
			sh.mu.Unlock()
		}
	}
	_, err = l.TryLockRange(string(x2), string(x2)+"\x00", testOptions{})
	require.True(t, released, "the space was readied in more than one batch")
	require.True(t, shifted, "x2 shifted back into x1's slot")
	require.ErrorIs(t, err, ErrLocked, "DESIGN §17.1 (bringOwnerWaits), a column family's first range request "+
		"notes every entry made before it, from a copy of the index slots; a range over x2, which is held, was granted")

	require.True(t, h2.Release())
	for _, c := range held {
		require.True(t, c.Release())
	}
	assert.True(t, ProbeTableEmpty(l))
}
