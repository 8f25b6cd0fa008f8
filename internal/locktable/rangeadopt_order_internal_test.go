package locktable

import (
	"fmt"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The order of a range request's steps against the key requests of its column family (docs/
// DESIGN.md §17.1), each step taken through the code's own calls and ordered by its hooks: a key
// request marks its shard noted before it reads the cover, a range request publishes its span
// before it visits a key shard, and no range request goes on before its range space has noted
// the entries made before it. Each broken, a range is granted over a key held inside it (// two locks of a column family conflict when their key sets meet and one is exclusive). And a
// range that ends is marked so before its span leaves the cover: else a key inside it is granted
// while the range's handle still reports that it authorizes writes.

// keyInShard returns the first key of the form prefix%04d whose own shard in tab is shard (in or
// out, by in).
func keyInShard(tab *Table, prefix string, shard int, in bool) []byte {
	for i := 0; ; i++ {
		k := []byte(fmt.Sprintf("%s%04d", prefix, i))
		if (naturalShard(tab, k) == shard) == in {
			return k
		}
	}
}

// A key request in a shard where nothing was noted yet, between its read of the cover and the
// entry it makes, holds off a range request over its key that publishes its span then: the range
// request finds the shard noted and waits for its mutex. The key request goes through Lock's own
// path (Acquire, routesHome); the range request runs inside its read of the cover.
func TestKeyRequestBetweenCoverReadAndEntryHoldsOffARange(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
	other, err := l.TryLockRange("x", "y", testOptions{}) // makes the column family's range space
	require.NoError(t, err)
	require.True(t, other.Release())
	key := []byte("k1")
	sh := tab.shard(tab.hash(0, key))
	require.False(t, sh.order.noted.Load(), "the key's shard has had nothing noted")

	ranged := make(chan error, 1)
	passed := false
	tab.ranges.hooks.coverRead = func() {
		tab.ranges.hooks.coverRead = nil
		go func() {
			r, err := l.TryLockRange("k", "l", testOptions{Shared: true})
			if err == nil {
				r.Release()
			}
			ranged <- err
		}()
		passed = !testutil.NotReturned(ranged)
	}
	h, err := l.TryLock(key, testOptions{})
	require.NoError(t, err, "the key request, granted once the cover was read")
	if passed {
		t.Fatal("DESIGN §17.1 (routesHome): a range request passed the shard of a key request that had read the cover " +
			"without the shard noted, and was granted over the key the request then held exclusively")
	}
	require.ErrorIs(t, testutil.Await(t, ranged, "the range request"), ErrLocked,
		"a shared range over a key held exclusively")
	require.True(t, h.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// A range request's span is in the cover before it visits any key shard: a key request inside it,
// in a shard the range request has visited already, made while the range request brings in
// another shard's keys a batch at a time, is sent to the home shard, where the range request
// sees it once it is placed. The range request's step between two batches is its table's
// rangeHooks.betweenBatches.
func TestRangePublishesItsSpanBeforeItVisitsAShard(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
	other, err := l.TryLockRange("x", "y", testOptions{}) // makes the column family's range space
	require.NoError(t, err)
	require.True(t, other.Release())
	lastShard := KeyShards - 1
	// More shared holders inside the span in the last shard than one batch brings in: the range
	// request, shared, does not conflict with them, and yields between their batches.
	var shared []*Claim
	for i := 0; len(shared) < 2*broughtBatch+1; i++ {
		k := []byte(fmt.Sprintf("m%05d", i))
		if naturalShard(tab, k) != lastShard {
			continue
		}
		h, err := l.TryLock(k, testOptions{Shared: true})
		require.NoError(t, err)
		shared = append(shared, h)
	}
	key := keyInShard(tab, "mk", lastShard, false) // in a shard visited before the last
	sp := tab.spaceOf(0)
	var held *Claim
	published := true
	tab.ranges.hooks.betweenBatches = func() {
		if held != nil {
			return
		}
		published = sp.cover.Load().live.Covers(key)
		h, err := l.TryLock(key, testOptions{})
		require.NoError(t, err, "the range request is not placed yet")
		held = h
	}
	r, err := l.TryLockRange("m", "n", testOptions{Shared: true})
	require.NotNil(t, held, "the range request brought the last shard's keys in more than one batch")
	if err == nil {
		r.Release()
	}
	require.True(t, published, "DESIGN §17.1 (acquireRange): a range request visits key shards before its span is in the cover")
	require.ErrorIs(t, err, ErrLocked,
		"a shared range granted over a key held exclusively inside it, taken in its own shard while the range brought keys in")
	require.True(t, held.Release())
	for _, h := range shared {
		require.True(t, h.Release())
	}
	assert.True(t, ProbeTableEmpty(l))
}

// A range request that finds its column family's range space made but not yet ready (the first
// range request still notes the entries made before it, rangeSpace.ready) waits until it is: went
// on at once, it would pass a shard whose entries nobody noted yet, and be granted over a key held
// there.
func TestRangeRequestWaitsUntilItsSpaceIsReady(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
	lastShard := KeyShards - 1 // the first range request readies it last
	key := keyInShard(tab, "k", lastShard, true)
	h, err := l.TryLock(key, testOptions{})
	require.NoError(t, err)
	last := &tab.shards[lastShard]
	last.mu.Lock()
	first := make(chan error, 1)
	go func() {
		r, err := l.TryLockRange("a", "b", testOptions{})
		if err == nil {
			r.Release()
		}
		first <- err
	}()
	testutil.WaitUntil(t, "the first range request makes the range space", func() bool { return tab.spaceOf(0) != nil })
	second := make(chan error, 1)
	go func() {
		r, err := l.TryLockRange(string(key), string(key)+"\x00", testOptions{})
		if err == nil {
			r.Release()
		}
		second <- err
	}()
	early := !testutil.NotReturned(second)
	last.mu.Unlock()
	if early {
		t.Fatal("DESIGN §17.1 (spaceFor): a range request went on before its range space had noted the entries made before it, " +
			"and was granted over a key held there")
	}
	require.NoError(t, testutil.Await(t, first, "the first range request"))
	require.ErrorIs(t, testutil.Await(t, second, "the second range request"), ErrLocked, "an exclusive range over a held key")
	require.True(t, h.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// A range lock that ends is marked released or expired before its span leaves the cover: from
// then on a key request inside the span, which reads the cover without the home shard's mutex,
// takes its key in its own shard at once, and the range's handle, whose flags IsExpired reads
// without a mutex too, must no longer report that it authorizes writes. The key request runs as
// the span leaves the cover (rangeHooks.spanLeft), with the home shard's mutex still held by the
// range's end.
func TestEndedRangeIsMarkedBeforeItsSpanLeavesTheCover(t *testing.T) {
	for _, end := range []struct {
		name string
		end  func(r *Claim)
	}{
		{"Release", func(r *Claim) { require.True(t, r.Release()) }},
		{"Revoke", func(r *Claim) { r.Revoke() }},
	} {
		t.Run(end.name, func(t *testing.T) {
			tab := newTestTable(t)
			l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
			r, err := l.TryLockRange("k", "l", testOptions{})
			require.NoError(t, err)
			var inside *Claim
			var insideErr error
			authorized := false
			tab.ranges.hooks.spanLeft = func() {
				tab.ranges.hooks.spanLeft = nil
				inside, insideErr = l.TryLock([]byte("k1"), testOptions{})
				authorized = !r.Now().Dead() // IsExpired
			}
			end.end(r)
			require.True(t, inside != nil || insideErr != nil, "the key request ran as the span left the cover")
			require.NoError(t, insideErr, "the key request, made once the span left the cover")
			if authorized {
				t.Fatal("docs/DESIGN.md §17.1: a key inside a range was granted in its own shard " +
					"while the range's handle still reported that it authorized writes (IsExpired false): a range that ends " +
					"must be marked released or expired before its span leaves the cover")
			}
			require.True(t, inside.Release())
			assert.True(t, ProbeTableEmpty(l))
		})
	}
}
