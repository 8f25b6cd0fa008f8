//go:build invariants

package locktable

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/testutil"
)

// Tests of cost bounds, counted in steps that the table counts only in a build with the tag
// invariants (internal/invariants): they are built with it alone.

// With 100,000 keys held, a column family's first range lock, over all of them or over none,
// holds a shard's mutex for one bounded batch at a time: it looks at broughtScan slots of a
// shard's index and brings in broughtBatch keys at most under one hold, however many are held.
func TestFirstRangeHoldsEachShardForOneBatch(t *testing.T) {
	const n = 100_000
	for _, tc := range []struct {
		name       string
		start, end string
		moved      bool
	}{
		{"over none of them", "z", "", false},
		{"over all of them", "k", "l", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := newTestTable(t)
			l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
			held := make([]*Claim, n)
			for i := range held {
				h, err := l.TryLock([]byte(fmt.Sprintf("k%06d", i)), testOptions{})
				require.NoError(t, err)
				held[i] = h
			}
			r, err := l.TryLockRange(tc.start, tc.end, testOptions{Shared: true})
			if tc.moved {
				require.ErrorIs(t, err, ErrLocked, "a shared range waits for the keys held exclusive inside it")
			} else {
				require.NoError(t, err)
				require.True(t, r.Release())
			}
			sp := tab.spaceOf(0)
			st := sp.broughtSteps
			t.Logf("holds of a shard mutex: %d; at most %d slots looked at and %d keys brought in under one", st.holds.Load(), st.maxLooked.Load(), st.maxMoved.Load())
			assert.LessOrEqual(t, st.maxLooked.Load(), broughtScan)
			assert.LessOrEqual(t, st.maxMoved.Load(), broughtBatch)
			home := int(sp.homeIdx)
			inHome := 0
			for i := 0; i < n; i += 997 {
				if tab.ShardOf(0, held[i].key()) == home {
					inHome++
				}
			}
			if tc.moved {
				assert.Equal(t, (n+996)/997, inHome, "every key inside the range was brought into the home shard")
				assert.GreaterOrEqual(t, int(st.holds.Load()), n/broughtBatch)
			} else {
				assert.Less(t, inHome, (n+996)/997/8, "the keys stay in their own shards")
			}
			assert.Equal(t, n, tab.Counts().Held)
			for _, h := range held {
				require.True(t, h.Release())
			}
			assert.True(t, sp.cover.Load().retiring.Empty())
			assert.True(t, ProbeTableEmpty(l))
		})
	}
}

// orderReads is the items that range requests read so far in the orders of tab's key shards.
func orderReads(tab *Table) uint64 {
	var n uint64
	for i := range KeyShards {
		sh := &tab.shards[i]
		sh.mu.Lock()
		n += sh.order.read.Load()
		sh.mu.Unlock()
	}
	return n
}

// A range lock among n held keys of its column family reads, in the key shards' orders, the keys
// inside it and a bounded number more per shard, not the n: with 100 times the keys held, a range
// between two of them reads as many items. (The first range lock sorts in the keys held before.)
func TestRangeLockAmongHeldKeysCostsLogN(t *testing.T) {
	perOp := map[int]float64{}
	for _, n := range []int{1_000, 100_000} {
		tab := newTestTable(t)
		l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
		held := make([]*Claim, n)
		for i := range held {
			h, err := l.TryLock([]byte(fmt.Sprintf("k%07d", 2*i)), testOptions{})
			require.NoError(t, err)
			held[i] = h
		}
		first, err := l.TryLockRange("a", "b", testOptions{})
		require.NoError(t, err)
		require.True(t, first.Release())
		before := orderReads(tab)
		const ops = 200
		for j := range ops {
			i := j * (n / ops)
			r, err := l.TryLockRange(fmt.Sprintf("k%07d", 2*i+1), fmt.Sprintf("k%07d", 2*i+2), testOptions{})
			require.NoError(t, err)
			require.True(t, r.Release())
		}
		perOp[n] = float64(orderReads(tab)-before) / ops
		for _, h := range held {
			require.True(t, h.Release())
		}
		assert.True(t, ProbeTableEmpty(l))
	}
	t.Logf("items read per range Lock+Release among n held keys: %v", perOp)
	assert.LessOrEqual(t, perOp[100_000], 2*perOp[1_000]+float64(KeyShards), "the reads do not grow with n")
}

// holdKeys locks n keys of column family 0, k000000 on, and returns their claims.
func holdKeys(t *testing.T, l *testLocker, n int) []*Claim {
	t.Helper()
	held := make([]*Claim, n)
	for i := range held {
		h, err := l.TryLock([]byte(fmt.Sprintf("k%06d", i)), testOptions{})
		require.NoError(t, err)
		held[i] = h
	}
	return held
}

// homeIndexRehashed requires that column family 0's home shard holds n entries in an index that
// grew for them, and returns the most slots of it a resize read under one hold of a key shard's
// mutex.
func homeIndexRehashed(t *testing.T, tab *Table, n int) int {
	t.Helper()
	sp := tab.spaceOf(0)
	sp.home.mu.Lock()
	inHome, slots := sp.home.index.n, len(sp.home.index.slots)
	sp.home.mu.Unlock()
	require.Equal(t, n, inHome, "every key was brought into the home shard")
	require.Greater(t, slots, n, "the home shard's index grew as they came")
	return sp.broughtSteps.maxRehashed.Load()
}

// releaseAll releases every claim of held and requires the table then empty.
func releaseAll(t *testing.T, l *testLocker, held []*Claim) {
	t.Helper()
	for _, h := range held {
		require.True(t, h.Release())
	}
	assert.True(t, ProbeTableEmpty(l))
}

// assertHoldsRehashBounded runs bringIn at each of two sizes n, on a table of its own whose
// column family 0 holds n keys (held), which bringIn has brought into the home shard, and fails if
// the most slots of the home shard's index rehashed under one hold of a key shard's mutex grow
// from the smaller size to the larger by more than four batches' worth. what names the keys and
// hold the hold, for the log and the failure.
func assertHoldsRehashBounded(t *testing.T, sizes [2]int, what, hold string, bringIn func(tab *Table, l *testLocker, held []*Claim)) {
	t.Helper()
	rehashed := map[int]int{}
	for _, n := range sizes {
		tab := newTestTable(t)
		l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
		held := holdKeys(t, l, n)
		bringIn(tab, l, held)
		rehashed[n] = homeIndexRehashed(t, tab, n)
		releaseAll(t, l, held)
	}
	t.Logf("slots of the home shard's index rehashed under one hold of a key shard's mutex, at most, by %s: %v", what, rehashed)
	assert.LessOrEqual(t, rehashed[sizes[1]], rehashed[sizes[0]]+4*broughtBatch, "%s does not grow with n", hold)
}

// A column family's first range lock over n held keys brings them all into the home shard, whose
// index grows as they come, up to a rehash of every key brought in before; no such rehash runs
// under a key shard's mutex, which a batch holds too (growIndex): with 100 times the keys, a
// batch's hold reads no more slots of the home shard's index.
func TestFirstRangeGrowsTheHomeIndexOutsideKeyShards(t *testing.T) {
	assertHoldsRehashBounded(t, [2]int{1_000, 100_000}, "keys held", "a batch's hold", func(tab *Table, l *testLocker, held []*Claim) {
		_, err := l.TryLockRange("k", "l", testOptions{Shared: true})
		require.ErrorIs(t, err, ErrLocked, "a shared range waits for the keys held exclusive inside it")
	})
}

// A key request that a live span covers brings its key into the home shard itself when the range
// request has not yet (routeHomeLocked), under its key shard's mutex too; it grows the home
// shard's index outside that mutex as a batch does: with 10 times the keys, no more slots are
// rehashed under one hold. Between two of its batches (n/KeyShards keys a shard take two at
// least), once 60% of the n held keys are in, key requests for every key bring in the rest.
func TestKeyRequestGrowsTheHomeIndexOutsideItsShard(t *testing.T) {
	assertHoldsRehashBounded(t, [2]int{10_000, 100_000}, "keys held", "a key request's hold", func(tab *Table, l *testLocker, held []*Claim) {
		asked := false
		tab.ranges.hooks.betweenBatches = func() {
			sp := tab.spaceOf(0)
			sp.home.mu.Lock()
			inHome := sp.home.index.n
			sp.home.mu.Unlock()
			if asked || inHome < len(held)*6/10 {
				return
			}
			asked = true
			for _, h := range held {
				_, err := l.TryLock(h.key(), testOptions{})
				require.ErrorIs(t, err, ErrLocked)
			}
		}
		_, err := l.TryLockRange("k", "l", testOptions{Shared: true})
		require.ErrorIs(t, err, ErrLocked, "a shared range waits for the keys held exclusive inside it")
		tab.ranges.hooks.betweenBatches = nil
		require.True(t, asked, "the key requests ran while the range request brought keys in")
	})
}

// A column family's first range request brings in every key an owner's request waits for, in
// batches under a key shard's mutex (bringOwnerWaits), and grows the home shard's index outside
// that mutex as bringIn does: with 10 times the keys waited for, no more slots are rehashed under
// one hold.
func TestNewSpaceGrowsTheHomeIndexOutsideKeyShards(t *testing.T) {
	assertHoldsRehashBounded(t, [2]int{200, 2_000}, "keys waited for", "a batch's hold", func(tab *Table, l *testLocker, held []*Claim) {
		ctx, cancel := context.WithCancel(context.Background())
		waits := make([]<-chan lockResult, len(held))
		for i, h := range held {
			waits[i] = ownerLockAsync(ctx, l, h.key(), testOptions{}, l.Begin())
		}
		require.Eventually(t, func() bool { return tab.Counts().Waiting == len(held) }, 10*time.Second, time.Millisecond,
			"every owner's request queued")
		r, err := l.TryLockRange("z", "", testOptions{})
		require.NoError(t, err)
		require.True(t, r.Release())
		cancel()
		for _, w := range waits {
			require.ErrorIs(t, testutil.Await(t, w, "an owner's request").err, context.Canceled)
		}
	})
}
