package locktable

import (
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A sharer's place is found from its state word whatever the number of sharers, and from a scan
// only past the places the word can record; giving back any share keeps every other place right.
func TestSharerPlaces(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
	mk := func() *Claim {
		h := l.newClaim([]byte("k"), testOptions{Shared: true}, nil)
		return h
	}
	var e keyEntry
	hs := make([]*Claim, 6)
	for i := range hs {
		hs[i] = mk()
		hs[i].state.Store(e.addSharer(hs[i], hs[i].flags()) | flagHeld)
	}
	require.Equal(t, int32(6), e.shares)
	check := func() {
		t.Helper()
		for _, h := range e.appendHolders(nil) {
			p := e.placeOf(h)
			require.GreaterOrEqual(t, p, 0)
			require.Equal(t, p, h.sharePos())
			require.NotZero(t, h.flags()&flagShared, "the flags survive the place")
			require.NotZero(t, h.flags()&flagHeld)
		}
	}
	check()
	for _, i := range []int{2, 0, 5, 1} { // the middle, the holder slot, the last, another
		e.removeSharerAt(hs[i], e.placeOf(hs[i]))
		assert.Equal(t, -1, e.placeOf(hs[i]))
		check()
	}
	require.Equal(t, int32(2), e.shares)
	e.removeSharerAt(hs[3], e.placeOf(hs[3]))
	e.removeSharerAt(hs[4], e.placeOf(hs[4]))
	assert.Nil(t, e.holder)
	assert.Zero(t, e.shares)

	// Past the places a state word records, a sharer is found by a scan.
	var far keyEntry
	far.holder = mk()
	far.shares = 1
	far.sharers = &sharerList{claims: make([]*Claim, sharePosFar-2, sharePosFar+4)}
	for range 4 {
		h := mk()
		h.state.Store(far.addSharer(h, h.flags()) | flagHeld)
		assert.LessOrEqual(t, h.sharePos(), sharePosFar)
	}
	for _, h := range far.others()[sharePosFar-2:] {
		p := far.placeOf(h)
		require.Positive(t, p)
		require.Same(t, h, far.others()[p-1])
	}
	last := far.others()[len(far.others())-1]
	first := far.others()[sharePosFar-1] // the first one recorded as far
	far.removeSharerAt(first, far.placeOf(first))
	p := far.placeOf(last)
	require.Equal(t, sharePosFar, p, "the last sharer moved into the freed place")
}

// The fields an uncontended Lock and Release touch in an entry (all but the sharers slice) sit
// in one cache line in each of a shard's own entries.
func TestOwnEntryLayout(t *testing.T) {
	var sh shard
	for i := range sh.ownEntries {
		e := &sh.ownEntries[i]
		base := uintptr(unsafe.Pointer(&sh))
		first := uintptr(unsafe.Pointer(&e.hash)) - base
		last := uintptr(unsafe.Pointer(&e.unwatched)) - base
		assert.Equal(t, first/64, last/64, "own entry %d", i)
	}
}
