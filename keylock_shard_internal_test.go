package recordlock

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// The padding of the table and its shards does what keylock.go says: every shard starts on a
// falseSharingRange boundary (a table is allocated page-aligned), no two shards' state comes
// closer than falseSharingRange, and the fields an uncontended Lock and Release touch sit in the
// cache lines shardState's comment names.
func TestShardLayout(t *testing.T) {
	var tab table
	off := func(p unsafe.Pointer) uintptr { return uintptr(p) - uintptr(unsafe.Pointer(&tab)) }
	sh := &tab.shards[0]
	assert.Zero(t, off(unsafe.Pointer(sh))%falseSharingRange, "shards start on a boundary")
	assert.Zero(t, unsafe.Sizeof(shard{})%falseSharingRange, "and so every shard does")
	assert.GreaterOrEqual(t, unsafe.Sizeof(shard{})-unsafe.Sizeof(shardState{}), uintptr(falseSharingRange))

	line := func(p unsafe.Pointer) uintptr { return (uintptr(p) - uintptr(unsafe.Pointer(sh))) / 64 }
	assert.Equal(t, uintptr(0), line(unsafe.Pointer(&sh.mu)))
	assert.Equal(t, uintptr(0), line(unsafe.Pointer(&sh.spareOwn)))
	assert.Equal(t, uintptr(0), line(unsafe.Pointer(&sh.index.n)))
	assert.Equal(t, uintptr(1), line(unsafe.Pointer(&sh.index.own[0])))
	assert.Equal(t, uintptr(1), line(unsafe.Pointer(&sh.index.own[minSlots-1])))
	s := &sh.firstSched
	for _, p := range []unsafe.Pointer{unsafe.Pointer(&s.heap), unsafe.Pointer(&s.timer), unsafe.Pointer(&s.armedAt), unsafe.Pointer(&s.own[len(s.own)-1])} {
		assert.Equal(t, uintptr(2), line(p), "the first scheduler's hot fields share a line")
	}
}

// A Handle, the one allocation of an uncontended Lock, fits a 128-byte size class: the next class
// up, 144 bytes, straddles a third cache line for most handles.
func TestHandleSize(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(Handle{}), uintptr(128))
}
