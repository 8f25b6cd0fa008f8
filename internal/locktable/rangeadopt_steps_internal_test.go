//go:build invariants

package locktable

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// A column family's first range lock over n held keys brings them all into the home shard, whose
// index grows as they come, up to a rehash of every key brought in before; no such rehash runs
// under a key shard's mutex, which a batch holds too (growIndex): with 100 times the keys, a
// batch's hold reads no more slots of the home shard's index.
func TestFirstRangeGrowsTheHomeIndexOutsideKeyShards(t *testing.T) {
	rehashed := map[int]int{}
	for _, n := range []int{1_000, 100_000} {
		tab := newTestTable(t)
		l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
		held := make([]*Claim, n)
		for i := range held {
			h, err := l.TryLock([]byte(fmt.Sprintf("k%06d", i)), testOptions{})
			require.NoError(t, err)
			held[i] = h
		}
		_, err := l.TryLockRange("k", "l", testOptions{Shared: true})
		require.ErrorIs(t, err, ErrLocked, "a shared range waits for the keys held exclusive inside it")
		sp := tab.spaceOf(0)
		sp.home.mu.Lock()
		inHome, slots := sp.home.index.n, len(sp.home.index.slots)
		sp.home.mu.Unlock()
		require.Equal(t, n, inHome, "every key was brought into the home shard")
		require.Greater(t, slots, n, "the home shard's index grew as they came")
		rehashed[n] = sp.broughtSteps.maxRehashed.Load()
		for _, h := range held {
			require.True(t, h.Release())
		}
		assert.True(t, ProbeTableEmpty(l))
	}
	t.Logf("slots of the home shard's index rehashed under one hold of a key shard's mutex, at most, by keys held: %v", rehashed)
	assert.LessOrEqual(t, rehashed[100_000], rehashed[1_000]+4*broughtBatch, "a batch's hold does not grow with n")
}
