package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A lapse settled before its timer ran takes the lease off the scheduler then (docs/DESIGN.md
// §4.3): a watched lease that lapses while no timer runs (the clock moves on between two reads),
// settled by Now, is on no heap once Now returns.
func TestLapseSettledBeforeItsTimerLeavesTheScheduler(t *testing.T) {
	clk := &jumpingClock{ManualClock: NewManualClock(time.Unix(1e9, 0))}
	l := newTestLocker(t, newTestTable(t), clk)
	key := []byte("k")
	h, err := l.TryLock(key, testOptions{Lease: time.Second})
	require.NoError(t, err)
	got := lockAsync(context.Background(), l, key, testOptions{})
	WaitQueued(t, l, key, 1) // h's lease is watched now
	sh := h.shard()
	sh.mu.Lock()
	require.GreaterOrEqual(t, h.heapIdx, int32(0), "the lease of a key waited for is scheduled")
	sh.mu.Unlock()

	clk.jump.Store(int64(2 * time.Second))
	clk.Mono() // the lease lapses, and no timer runs
	require.True(t, h.Now().Expired())
	sh.mu.Lock()
	idx := h.heapIdx
	sh.mu.Unlock()
	assert.Equal(t, int32(-1), idx, "a lapse settled before its timer ran left the lease scheduled")
	require.True(t, granted(t, got, "the waiter, once the lease lapsed").Release())
	assert.True(t, ProbeTableEmpty(l))
}
