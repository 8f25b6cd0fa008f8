package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/testutil"
)

// A counted waiter granted its key just before its Locker closes gives its room in the bound back
// once (docs/DESIGN.md §18): Acquire releases the grant, which gives the room back with the key,
// and then, failing with ErrClosed, must find the claim no longer counted.
func TestGrantGivenBackAsTheLockerClosesReturnsItsRoomOnce(t *testing.T) {
	clk := NewManualClock(time.Unix(1e9, 0))
	l := newTestLocker(t, newTestTable(t), clk)
	l.ten.SetBound(2)
	key := []byte("k")
	holder, err := l.TryLock(key, testOptions{Lease: time.Hour})
	require.NoError(t, err)
	require.True(t, l.ten.Reserve(1))
	h := &Claim{}
	l.ten.Prepare(h, nil, 0, key, AskCounted)
	res := make(chan error, 1)
	go func() {
		_, err := h.Acquire(context.Background(), time.Hour, defaultTimeout, true, false)
		res <- err
	}()
	WaitQueued(t, l, key, 1)
	clk.Advance(2 * bargeWindow) // granted directly, not woken to compete with newcomers

	releaseAndCloseAtOnce(l, holder)

	require.ErrorIs(t, testutil.Await(t, res, "the waiter's result"), ErrClosed)
	assert.Zero(t, l.ten.bound.used.Load(), "the room of a grant given back as the Locker closed went back more than once")
	assert.True(t, ProbeTableEmpty(l))
}
