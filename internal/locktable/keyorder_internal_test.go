package locktable

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// orderHeld is the most items any key shard's order holds, pending and in its tree.
func orderHeld(tab *Table) int {
	most := 0
	for i := range KeyShards {
		sh := &tab.shards[i]
		sh.mu.Lock()
		n := len(sh.order.pending)
		if sh.order.tree != nil {
			n += sh.order.tree.Len()
		}
		sh.mu.Unlock()
		most = max(most, n)
	}
	return most
}

// The key shards' orders shrink as entries leave, not only as they come: once the keys of a
// column family with a range space are all released, no shard's order holds anything,
// whether the keys were still pending or a range request had sorted them in.
func TestKeyOrderShrinksAsKeysLeave(t *testing.T) {
	for _, sorted := range []bool{false, true} {
		t.Run(fmt.Sprintf("sorted=%v", sorted), func(t *testing.T) {
			tab := newTestTable(t)
			l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
			r, err := l.TryLockRange("a", "b", testOptions{})
			require.NoError(t, err)
			const n = 50_000
			held := make([]*Claim, n)
			for i := range held {
				h, err := l.TryLock([]byte(fmt.Sprintf("k%07d", i)), testOptions{})
				require.NoError(t, err)
				held[i] = h
			}
			if sorted {
				s, err := l.TryLockRange("x", "y", testOptions{Shared: true})
				require.NoError(t, err)
				require.True(t, s.Release())
			}
			assert.GreaterOrEqual(t, orderHeld(tab), n/KeyShards, "the held keys are noted")
			for _, h := range held {
				require.True(t, h.Release())
			}
			assert.Zero(t, orderHeld(tab), "the orders hold what left")
			require.True(t, r.Release())
			assert.True(t, ProbeTableEmpty(l))
		})
	}
}
