//go:build invariants

package locktable

import (
	"fmt"
	"math/bits"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The cost bounds of a key lock among ranges (rangeset.go), in steps, not time: the tree nodes
// visited and the queued range requests tried, read from the column family's range set. The
// table counts them only in a build with the tag invariants (internal/invariants), and these tests
// are built with it alone.

// rangeSteps reads the steps of l's range set of column family 0 so far.
func rangeSteps(l *testLocker) uint64 {
	sh, sp := (&modelRun{tab: l.tab}).rangeSpaceLocked()
	defer sh.mu.Unlock()
	return sp.ranges.steps()
}

// keyLockSteps is the steps per shared Lock+Release of key, over ops of them.
func keyLockSteps(t *testing.T, l *testLocker, key string, ops int) float64 {
	t.Helper()
	before := rangeSteps(l)
	for range ops {
		h, err := l.TryLock([]byte(key), testOptions{Shared: true})
		require.NoError(t, err)
		require.True(t, h.Release())
	}
	return float64(rangeSteps(l)-before) / float64(ops)
}

// A shared key lock under R shared ranges that all cover it costs O(log R) steps, not R: it
// looks only where an exclusive lock or a queued request could be, which here are beside it.
func TestSharedKeyUnderSharedRangesCostsLogR(t *testing.T) {
	perOp := map[int]float64{}
	for _, r := range []int{64, 4096} {
		l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
		var held []*Claim
		for i := range r {
			h, err := l.TryLockRange("k", fmt.Sprintf("l%05d", i), testOptions{Shared: true})
			require.NoError(t, err)
			held = append(held, h)
			beside, err := l.TryLockRange(fmt.Sprintf("x%05d", i), fmt.Sprintf("x%05d\x00", i), testOptions{})
			require.NoError(t, err)
			held = append(held, beside)
		}
		perOp[r] = keyLockSteps(t, l, "k", 200)
		for _, h := range held {
			require.True(t, h.Release())
		}
		assert.True(t, ProbeTableEmpty(l))
	}
	t.Logf("steps per shared Lock+Release: %v", perOp)
	bound := 4 * float64(bits.Len(4096)) // a few paths down a tree of 4,096
	assert.LessOrEqual(t, perOp[4096], bound, "O(log R): R grew 64×")
	assert.LessOrEqual(t, perOp[4096], 2.5*perOp[64]+4, "the steps grow like log R, not R")
}

// A key lock under one queued shared range costs no more for the range requests queued over other
// keys than a path down the tree they share: its release serves only the requests queued over it.
func TestKeyLockBesideQueuedRangesCostsLogQ(t *testing.T) {
	perOp := map[int]float64{}
	for _, q := range []int{32, 512} {
		l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
		var held []*Claim
		var queued []<-chan lockResult
		for i := range q {
			k := fmt.Sprintf("q%05d", i)
			h, err := l.TryLock([]byte(k), testOptions{})
			require.NoError(t, err)
			held = append(held, h)
			queued = append(queued, rangeAsync(l, k, k+"\x00", testOptions{Shared: true}, nil))
			waitRangesQueued(t, l, i+1) // one at a time, so that the tree's shape is the same every run
		}
		blocker, err := l.TryLock([]byte("k0"), testOptions{})
		require.NoError(t, err)
		held = append(held, blocker)
		queued = append(queued, rangeAsync(l, "k", "l", testOptions{Shared: true}, nil))
		waitRangesQueued(t, l, q+1)

		perOp[q] = keyLockSteps(t, l, "k5", 200)
		for _, h := range held {
			require.True(t, h.Release())
		}
		for _, ch := range queued {
			res := testutil.Await(t, ch, "a queued range, once its key is released")
			require.NoError(t, res.err)
			require.True(t, res.h.Release())
		}
		assert.True(t, ProbeTableEmpty(l))
	}
	t.Logf("steps per shared Lock+Release under a queued range: %v", perOp)
	assert.LessOrEqual(t, perOp[512], 10*float64(bits.Len(512)), "a few paths down a tree of 512")
	assert.LessOrEqual(t, perOp[512], 3*perOp[32], "the steps grow like log Q, not Q: Q grew 16×")
}
