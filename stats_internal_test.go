//go:build invariants

package recordlock

import (
	"context"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/debugview"
	"github.com/recordlock/recordlock/internal/tempdb"
)

// Built with the tag invariants alone, in which the table counts what its views read
// (locktable.Table.Visited, internal/invariants).

// Locks() and Waits() cost O(s + q) for a key with s sharers and q queued requests, not
// O(s × q): each reads the key's queue once, however many sharers report its length. Counted in
// holders and requests read (locktable.Table.Visited) under the shard mutex, for 1,000 × 1,000.
func TestLocksAndWaitsCostSharersPlusQueue(t *testing.T) {
	const sharers, queued = 1000, 1000
	db := tempdb.New(t)
	clk := NewManualClock(time.Unix(1_700_000_000, 0))
	l := newTestLocker(t, db, clk)
	key := []byte("hot")
	var holders []*Handle
	for range sharers {
		h, err := l.Lock(context.Background(), key, Options{Shared: true, Lease: time.Minute})
		require.NoError(t, err)
		holders = append(holders, h)
	}
	results := make(chan error, queued)
	for range queued {
		go func() { // granted in turn, each gives the key back at once
			h, err := l.Lock(context.Background(), key, Options{Timeout: time.Minute})
			if err == nil {
				h.Release()
			}
			results <- err
		}()
	}
	WaitQueued(t, l, key, queued)

	read := func(name string, f func() int) {
		before := visited(l)
		rows := f()
		cost := visited(l) - before
		assert.LessOrEqual(t, cost, uint64(2*(sharers+queued)), "%s read %d holders and requests for %d rows", name, cost, rows)
	}
	read("Locks", func() int {
		n := 0
		for info := range l.Locks() {
			assert.Equal(t, queued, info.Waiters)
			n++
		}
		assert.Equal(t, sharers, n)
		return n
	})
	read("Waits", func() int {
		n := 0
		for range l.Waits() {
			n++
		}
		assert.Equal(t, queued, n)
		return n
	})
	read("the debug page's view", func() int {
		waits, locks := l.WaitsAndHolders(debugview.Pass{})
		for _, info := range locks {
			assert.Equal(t, queued, info.Waiters)
		}
		return len(waits) + len(locks)
	})

	for _, h := range holders {
		h.Release()
	}
	for range queued {
		require.NoError(t, testutil.Await(t, results, "a queued Lock"))
	}
}

// visited is how many holders and queued requests Locks and Waits have read in l's table.
func visited(l *Locker) uint64 { return l.tab.Visited() }
