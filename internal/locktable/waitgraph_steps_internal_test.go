//go:build invariants

package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of cost bounds, counted in steps that the table counts only in a build with the tag
// invariants (internal/invariants): they are built with it alone.

// edgesRead is the number of edges every search of l's wait-for graph has read so far.
func edgesRead(l *testLocker) uint64 {
	g := &l.tab.graph
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.edgesRead.Load()
}

// The check of a wait reads one edge per Txn on the path it follows, however many requests are
// queued: with 512 Txns queued for a hot key, the 513th reads as many edges as the first. When
// the holder itself waits behind a queue of its own, the path is one Txn longer and the check
// reads one edge more, again whatever the queues' lengths.
func TestWaitCheckCostDoesNotGrowWithQueue(t *testing.T) {
	const queued = 512
	for _, tc := range []struct {
		name        string
		holderWaits bool
		edges       uint64 // read by each check: one per Txn on the path
	}{
		{name: "holder runs", edges: 1},
		{name: "holder waits behind a queue", holderWaits: true, edges: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := newTestTable(t)
			l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
			ctx := context.Background()
			hot, other := []byte("hot"), []byte("other")
			holder := l.Begin()
			_, err := holder.Lock(ctx, hot, testOptions{})
			require.NoError(t, err)

			inGraph := 0
			var otherQueue *convoy
			var otherHolder *testTxn
			if tc.holderWaits {
				otherHolder = l.Begin()
				_, err := otherHolder.Lock(ctx, other, testOptions{})
				require.NoError(t, err)
				otherQueue = newConvoy(queued + 1)
				for range queued {
					inGraph++
					otherQueue.join(t, l, l.Begin(), other, inGraph)
				}
				inGraph++
				otherQueue.join(t, l, holder, other, inGraph) // the holder of hot waits last for other
			}

			hotQueue := newConvoy(queued + 1)
			perCheck := make([]uint64, 0, queued+1)
			for range queued + 1 {
				before := edgesRead(l)
				inGraph++
				hotQueue.join(t, l, l.Begin(), hot, inGraph)
				perCheck = append(perCheck, edgesRead(l)-before)
			}
			for i, n := range perCheck {
				require.Equal(t, tc.edges, n, "the check of waiter %d of %s", i+1, hot)
			}

			// Unwind: each Txn that gets its key rolls back, and the holder of hot rolls back
			// once it gets other.
			if tc.holderWaits {
				otherHolder.Rollback()
				otherQueue.finish(t)
			} else {
				holder.Rollback()
			}
			hotQueue.finish(t)
			assert.True(t, l.tab.Empty())
		})
	}
}
