package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/testutil"
)

// Closing a tenant fails its own queued requests and no other tenant's (docs/DESIGN.md §11): a
// request of another tenant, queued for the same key behind the closing tenant's, keeps waiting
// and is granted once the key is free.
func TestCloseFailsOnlyItsOwnWaiters(t *testing.T) {
	tab := newTestTable(t)
	clk := NewManualClock(time.Unix(1, 0))
	holder, other := newTestLocker(t, tab, clk), newTestLocker(t, tab, clk)
	closing, err := newLocker(tab, clk)
	require.NoError(t, err)
	key := []byte("k")
	h, err := holder.TryLock(key, testOptions{})
	require.NoError(t, err)
	gotClosing := lockAsync(context.Background(), closing, key, testOptions{})
	WaitQueued(t, holder, key, 1)
	gotOther := lockAsync(context.Background(), other, key, testOptions{})
	WaitQueued(t, holder, key, 2)

	require.NoError(t, closing.Close())
	assert.ErrorIs(t, testutil.Await(t, gotClosing, "the closing tenant's request").err, ErrClosed)
	require.True(t, testutil.NotReturned(gotOther), "Close failed another tenant's request")
	require.True(t, h.Release())
	require.True(t, granted(t, gotOther, "the other tenant's request, once the key was free").Release())
	assert.True(t, ProbeTableEmpty(holder))
}
