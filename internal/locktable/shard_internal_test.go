package locktable

import (
	"math/bits"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The padding of the table and its shards does what shard.go says: every shard starts on a
// falseSharingRange boundary (a table is allocated page-aligned), no two shards' state comes
// closer than falseSharingRange, and the fields an uncontended Lock and Release touch sit in the
// cache lines shardState's comment names.
func TestShardLayout(t *testing.T) {
	var tab Table
	off := func(p unsafe.Pointer) uintptr { return uintptr(p) - uintptr(unsafe.Pointer(&tab)) }
	sh := &tab.shards[0]
	assert.Zero(t, off(unsafe.Pointer(sh))%falseSharingRange, "shards start on a boundary")
	assert.Zero(t, unsafe.Sizeof(shard{})%falseSharingRange, "and so every shard does")
	assert.GreaterOrEqual(t, unsafe.Sizeof(shard{})-unsafe.Sizeof(shardState{}), uintptr(falseSharingRange))

	line := func(p unsafe.Pointer) uintptr { return (uintptr(p) - uintptr(unsafe.Pointer(sh))) / 64 }
	assert.Equal(t, uintptr(0), line(unsafe.Pointer(&sh.mu)))
	assert.Equal(t, uintptr(0), line(unsafe.Pointer(&sh.ownSpare)))
	assert.Equal(t, uintptr(0), line(unsafe.Pointer(&sh.index.n)))
	assert.Equal(t, uintptr(1), line(unsafe.Pointer(&sh.index.own[0])))
	assert.Equal(t, uintptr(1), line(unsafe.Pointer(&sh.index.own[minSlots-1])))
	s := &sh.firstSched
	for _, p := range []unsafe.Pointer{unsafe.Pointer(&s.heap), unsafe.Pointer(&s.timer), unsafe.Pointer(&s.armedAt), unsafe.Pointer(&s.own[len(s.own)-1])} {
		assert.Equal(t, uintptr(2), line(p), "the first scheduler's hot fields share a line")
	}
}

func TestShardTableShrinksOnceKeysLeave(t *testing.T) {
	tab := newTestTable(t)
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, tab, clk)
	keys := keysInShard(l, shrinkAfter+10)
	sh := l.tab.shard(l.tab.hash(0, keys[0]))

	handles := make([]*Claim, 0, len(keys))
	for _, k := range keys {
		h, err := l.TryLock(k, testOptions{})
		require.NoError(t, err)
		h.Done() // watched: its deadline goes on the heap
		handles = append(handles, h)
	}
	sh.mu.Lock()
	grown, slots, heapCap := sh.index.n, len(sh.index.slots), cap(sh.sched(l).heap)
	sh.mu.Unlock()
	require.Equal(t, len(keys), grown)
	require.Greater(t, slots, shrinkAfter)
	require.Greater(t, heapCap, shrinkAfter)

	for _, h := range handles[1:] {
		require.True(t, h.Release())
	}
	sh.mu.Lock()
	assert.Equal(t, 1, sh.index.n)
	assert.LessOrEqual(t, len(sh.index.slots), 4*minSlots, "the table shrank as its keys left")
	assert.Equal(t, maxSpare, sh.nSpare, "only a few allocated entries are kept for reuse")
	sh.mu.Unlock()

	require.True(t, handles[0].Release())
	sh.mu.Lock()
	assert.Zero(t, sh.index.n)
	assert.Len(t, sh.index.slots, minSlots, "an idle table is back to its idle size")
	assert.Zero(t, sh.nSpare)
	assert.Equal(t, [maxSpare]*keyEntry{}, sh.spare, "an idle shard keeps no allocated entry")
	assert.Equal(t, len(sh.ownEntries), bits.OnesCount8(sh.ownSpare), "the shard's own entries are spare again")
	assert.Nil(t, sh.sched(l).heap, "the grown heap is dropped once empty")
	sh.mu.Unlock()

	// The shrunk shard works as before, and finds every key again.
	for _, k := range keys {
		h, err := l.TryLock(k, testOptions{})
		require.NoError(t, err)
		_, err = l.TryLock(k, testOptions{})
		require.ErrorIs(t, err, ErrLocked)
		require.True(t, h.Release())
	}
	assert.True(t, ProbeTableEmpty(l))
}

// An entry takes one 64-byte allocation, a cache line: its place in a key lock's memory
// (BENCHMARKS.md, P5), in a key shard and in a home shard alike.
func TestEntryFitsOneCacheLine(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(keyEntry{}), uintptr(64))
}
