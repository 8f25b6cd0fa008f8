package locktable

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// joinShared starts txn's shared Lock of key, which must wait, in a goroutine of the convoy that
// rolls txn back once it returns, and returns once txn is in the wait-for graph, which then holds
// inGraph Txns.
func (c *convoy) joinShared(t testing.TB, l *testLocker, txn *testTxn, key []byte, inGraph int) {
	t.Helper()
	c.n++
	go func() {
		_, err := txn.Lock(context.Background(), key, testOptions{Shared: true})
		txn.Rollback()
		c.errs <- err
	}()
	require.Eventually(t, func() bool { return graphWaiting(l) == inGraph },
		10*time.Second, 100*time.Microsecond, "waiting for %d Txns in the graph", inGraph)
}

// The check of a shared request's wait reads a constant number of edges however many readers are
// queued: each reader behind a writer reads its edge to that writer (and to an exclusive holder),
// and the writer's edges to the holders. Writers that gave up between the readers are skipped
// without the cost growing either; the reader whose edge a quitter's departure moved checks again,
// at the same cost.
func TestSharedWaitCheckCostDoesNotGrowWithQueue(t *testing.T) {
	const queued = 256
	for _, tc := range []struct {
		name   string
		shared bool   // the hot key is held shared
		edges  uint64 // read by each reader's check
	}{
		{name: "held exclusively", edges: 3}, // reader→holder, reader→writer, writer→holder
		{name: "held shared", shared: true, edges: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := newTestTable(t)
			clk := NewManualClock(time.Unix(1, 0))
			l := newTestLocker(t, tab, clk)
			ctx := context.Background()
			hot := []byte("hot")
			holder := l.Begin()
			_, err := holder.Lock(ctx, hot, testOptions{Shared: tc.shared})
			require.NoError(t, err)
			writers := newConvoy(1)
			writers.join(t, l, l.Begin(), hot, 1)

			readers := newConvoy(queued)
			perCheck := make([]uint64, 0, queued)
			for i := range queued {
				if i%16 == 8 {
					// A writer that gives up leaves the readers behind it pointing past it.
					quitter := l.Begin()
					res := make(chan error, 1)
					go func() {
						_, err := quitter.Lock(ctx, hot, testOptions{Timeout: time.Second})
						quitter.Rollback()
						res <- err
					}()
					require.Eventually(t, func() bool { return graphWaiting(l) == 2+i },
						10*time.Second, 100*time.Microsecond)
					before := edgesRead(l)
					readers.joinShared(t, l, l.Begin(), hot, 3+i) // its nearest writer is the quitter
					perCheck = append(perCheck, edgesRead(l)-before)
					beforeQuit := edgesRead(l)
					clk.Advance(time.Second)
					require.ErrorIs(t, <-res, ErrTimeout)
					require.Eventually(t, func() bool { return graphWaiting(l) == 2+i },
						10*time.Second, 100*time.Microsecond)
					// The reader's edge moved past the quitter to the first writer, a waiting Txn:
					// it checks again, at the cost of a check.
					require.Eventually(t, func() bool { return edgesRead(l)-beforeQuit == tc.edges },
						10*time.Second, 100*time.Microsecond, "the reader behind the quitter checks again")
					continue
				}
				before := edgesRead(l)
				readers.joinShared(t, l, l.Begin(), hot, 2+i)
				perCheck = append(perCheck, edgesRead(l)-before)
			}
			for i, n := range perCheck {
				require.Equal(t, tc.edges, n, "the check of reader %d", i+1)
			}
			g := &l.tab.graph
			g.mu.Lock()
			skipped := g.skipped
			g.mu.Unlock()
			assert.LessOrEqual(t, skipped, uint64(queued/16), "each writer that gave up is stepped over at most once")
			holder.Rollback()
			writers.finish(t)
			readers.finish(t)
			assert.True(t, l.tab.Empty())
		})
	}
}

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
		e.removeSharer(hs[i])
		assert.Equal(t, -1, e.placeOf(hs[i]))
		check()
	}
	require.Equal(t, int32(2), e.shares)
	e.removeSharer(hs[3])
	e.removeSharer(hs[4])
	assert.Nil(t, e.holder)
	assert.Zero(t, e.shares)

	// Past the places a state word records, a sharer is found by a scan.
	var far keyEntry
	far.holder = mk()
	far.shares = 1
	far.sharers = make([]*Claim, sharePosFar-2, sharePosFar+4)
	for range 4 {
		h := mk()
		h.state.Store(far.addSharer(h, h.flags()) | flagHeld)
		assert.LessOrEqual(t, h.sharePos(), sharePosFar)
	}
	for _, h := range far.sharers[sharePosFar-2:] {
		p := far.placeOf(h)
		require.Positive(t, p)
		require.Same(t, h, far.sharers[p-1])
	}
	last := far.sharers[len(far.sharers)-1]
	far.removeSharer(far.sharers[sharePosFar-1]) // the first one recorded as far
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
