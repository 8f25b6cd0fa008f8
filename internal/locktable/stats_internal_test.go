package locktable

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A shard of a few keys is visited under one hold of its mutex (visitFewHoldersLocked): a holder whose
// lease lapsed unwatched is settled and not visited, and taking its entry out of the index, which
// can move another entry to a slot already passed, leaves no other holder unvisited or visited
// twice.
func TestVisitHoldersOfAFewKeysSettlesLapsedOnes(t *testing.T) {
	tab := newTestTable(t)
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, tab, clk)
	// Keys of one home slot, whatever the index's size up to 64 slots: one probe run, in which
	// taking an entry out moves the next one back.
	var keys [][]byte
	for i := 0; len(keys) < visitTogether; i++ {
		k := []byte{byte(i), byte(i >> 8), byte(i >> 16), byte(i >> 24)}
		hash := l.tab.hash(0, k)
		if l.tab.shard(hash) == &l.tab.shards[0] && hash>>hashShift&63 == 0 {
			keys = append(keys, k)
		}
	}
	want := map[string]int{}
	var live []*Claim
	for i, k := range keys {
		lease := time.Minute
		if i%2 == 0 {
			lease = time.Second // lapses unwatched: nothing is queued for it
		}
		h, err := l.TryLock(k, testOptions{Lease: lease})
		require.NoError(t, err)
		if i%2 == 1 {
			want[string(k)] = 1
			live = append(live, h)
		}
	}
	clk.Advance(2 * time.Second)
	got := map[string]int{}
	tab.VisitHolders(0, func(s Snapshot, waiters int) {
		got[string(s.Key)]++
		assert.Zero(t, waiters)
	})
	assert.Equal(t, want, got, "each live holder once, no lapsed one")
	for _, h := range live {
		require.True(t, h.Release())
	}
}
