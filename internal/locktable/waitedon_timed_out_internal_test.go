package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/testutil"
)

// A request that left its queue ungranted (here, timed out) is waited on no more (WaitedOn),
// though requests are still queued for its key: leaving ends its tie to the key's entry.
func TestRequestThatTimedOutIsNotWaitedOn(t *testing.T) {
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, newTestTable(t), clk)
	key := []byte("k")
	holder, err := l.TryLock(key, testOptions{})
	require.NoError(t, err)
	early := l.newClaim(key, testOptions{}, nil)
	res := make(chan error, 1)
	go func() {
		_, err := early.Acquire(context.Background(), time.Minute, time.Second, true, false)
		res <- err
	}()
	WaitQueued(t, l, key, 1)
	late := lockAsync(context.Background(), l, key, testOptions{Timeout: time.Hour})
	WaitQueued(t, l, key, 2)

	clk.Advance(2 * time.Second)
	require.ErrorIs(t, testutil.Await(t, res, "the early request, timed out"), ErrTimeout)
	assert.False(t, early.WaitedOn(), "a request that timed out reports the request queued behind it")
	require.True(t, holder.Release())
	require.True(t, granted(t, late, "the late request, once the key was free").Release())
	assert.True(t, ProbeTableEmpty(l))
}
