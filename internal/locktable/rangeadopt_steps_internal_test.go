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

// A column family's first range lock over n held keys brings them all into the home shard, whose
// index grows as they come, up to a rehash of every key brought in before; no such rehash runs
// under a key shard's mutex, which a batch holds too (growIndex): with 100 times the keys, a
// batch's hold reads no more slots of the home shard's index.
func TestFirstRangeGrowsTheHomeIndexOutsideKeyShards(t *testing.T) {
	rehashed := map[int]int{}
	for _, n := range []int{1_000, 100_000} {
		tab := newTestTable(t)
		l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
		held := holdKeys(t, l, n)
		_, err := l.TryLockRange("k", "l", testOptions{Shared: true})
		require.ErrorIs(t, err, ErrLocked, "a shared range waits for the keys held exclusive inside it")
		rehashed[n] = homeIndexRehashed(t, tab, n)
		releaseAll(t, l, held)
	}
	t.Logf("slots of the home shard's index rehashed under one hold of a key shard's mutex, at most, by keys held: %v", rehashed)
	assert.LessOrEqual(t, rehashed[100_000], rehashed[1_000]+4*broughtBatch, "a batch's hold does not grow with n")
}

// A key request that a live span covers brings its key into the home shard itself when the range
// request has not yet (routeHomeLocked), under its key shard's mutex too; it grows the home
// shard's index outside that mutex as a batch does: with 10 times the keys, no more slots are
// rehashed under one hold. Between two of its batches (n/KeyShards keys a shard take two at
// least), once 60% of the n held keys are in, key requests for every key bring in the rest.
func TestKeyRequestGrowsTheHomeIndexOutsideItsShard(t *testing.T) {
	rehashed := map[int]int{}
	for _, n := range []int{10_000, 100_000} {
		tab := newTestTable(t)
		l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
		held := holdKeys(t, l, n)
		asked := false
		tab.ranges.hooks.betweenBatches = func() {
			sp := tab.spaceOf(0)
			sp.home.mu.Lock()
			inHome := sp.home.index.n
			sp.home.mu.Unlock()
			if asked || inHome < n*6/10 {
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
		rehashed[n] = homeIndexRehashed(t, tab, n)
		releaseAll(t, l, held)
	}
	t.Logf("slots of the home shard's index rehashed under one hold of a key shard's mutex, at most, by keys held: %v", rehashed)
	assert.LessOrEqual(t, rehashed[100_000], rehashed[10_000]+4*broughtBatch, "a key request's hold does not grow with n")
}

// A column family's first range request brings in every key an owner's request waits for, in
// batches under a key shard's mutex (bringOwnerWaits), and grows the home shard's index outside
// that mutex as bringIn does: with 10 times the keys waited for, no more slots are rehashed under
// one hold.
func TestNewSpaceGrowsTheHomeIndexOutsideKeyShards(t *testing.T) {
	rehashed := map[int]int{}
	for _, n := range []int{200, 2_000} {
		tab := newTestTable(t)
		l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
		ctx, cancel := context.WithCancel(context.Background())
		held := holdKeys(t, l, n)
		waits := make([]<-chan lockResult, n)
		for i, h := range held {
			waits[i] = ownerLockAsync(ctx, l, h.key(), testOptions{}, l.Begin())
		}
		require.Eventually(t, func() bool { return tab.Counts().Waiting == n }, 10*time.Second, time.Millisecond,
			"every owner's request queued")
		r, err := l.TryLockRange("z", "", testOptions{})
		require.NoError(t, err)
		require.True(t, r.Release())
		rehashed[n] = homeIndexRehashed(t, tab, n)
		cancel()
		for _, w := range waits {
			require.ErrorIs(t, testutil.Await(t, w, "an owner's request").err, context.Canceled)
		}
		releaseAll(t, l, held)
	}
	t.Logf("slots of the home shard's index rehashed under one hold of a key shard's mutex, at most, by keys waited for: %v", rehashed)
	assert.LessOrEqual(t, rehashed[2_000], rehashed[200]+4*broughtBatch, "a batch's hold does not grow with n")
}
