package recordlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/tempdb"
)

// Undoing an upgrade puts back a deadline that may have passed meanwhile: the lease then ends at
// once, as it would have without the upgrade, and the key passes to its waiter.
func TestLeaseStateUndoEndsAPassedLease(t *testing.T) {
	db := tempdb.New(t)
	clk := NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	l := newTestLocker(t, db, clk)
	other := newTestLocker(t, db, clk)
	h, err := l.Lock(context.Background(), []byte("k"), Options{Lease: time.Second})
	require.NoError(t, err)
	u, err := h.extend(time.Minute, true)
	require.NoError(t, err)
	granted := make(chan *Handle, 1)
	go func() {
		next, err := other.Lock(context.Background(), []byte("k"), Options{Timeout: time.Minute})
		assert.NoError(t, err)
		granted <- next
	}()
	require.Eventually(t, func() bool { return ProbeQueuedWaiters(l, []byte("k")) == 1 }, txnTestGuard, time.Millisecond)
	clk.Advance(2 * time.Second)
	require.False(t, h.IsExpired(), "upgraded, the lease lasts")
	u.undo()
	assert.NotZero(t, h.flags()&flagExpired, "undo ended the lease at once")
	assert.False(t, h.Hold())
	select {
	case next := <-granted: // no clock moved: only the undo can have passed the key on
		assert.True(t, next.Release())
	case <-time.After(txnTestGuard):
		t.Fatal("the waiter was not granted the key")
	}
	assert.True(t, h.IsLeaseExpired())
	assert.True(t, l.tab.empty())
}
