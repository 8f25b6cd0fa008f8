package recordlock

import (
	"context"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

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
	granted := lockAsync(context.Background(), other, []byte("k"), Options{Timeout: time.Minute})
	WaitQueued(t, l, []byte("k"), 1)
	clk.Advance(2 * time.Second)
	require.False(t, h.IsExpired(), "upgraded, the lease lasts")
	u.Undo()
	assert.True(t, h.status().Expired(), "undo ended the lease at once")
	assert.False(t, h.Hold())
	// No clock moved: only the undo can have passed the key on.
	next := testutil.Await(t, granted, "the waiter's grant")
	require.NoError(t, next.err)
	assert.True(t, next.h.Release())
	assert.True(t, h.IsLeaseExpired())
	assert.True(t, l.tab.Empty())
}
