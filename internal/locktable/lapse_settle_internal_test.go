package locktable

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hookedClock is a ManualClock that runs a hook, once set, inside its next Mono read: a step of
// another goroutine between a caller's reading and what it does with it.
type hookedClock struct {
	*ManualClock
	hook atomic.Pointer[func()]
}

func (c *hookedClock) Mono() time.Duration {
	if f := c.hook.Swap(nil); f != nil {
		(*f)()
	}
	return c.ManualClock.Mono()
}

// A lapse two observers find at once is settled once (docs/DESIGN.md §4.3): inside a fence, where
// the key stays held until the fence ends, Now finds the lease lapsed while another Now settles it
// first, and the second settling counts nothing again.
func TestLapseFoundByTwoObserversIsSettledOnce(t *testing.T) {
	clk := &hookedClock{ManualClock: NewManualClock(time.Unix(1e9, 0))}
	l := newTestLocker(t, newTestTable(t), clk)
	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Second})
	require.NoError(t, err)

	require.NoError(t, fence(h, func() error {
		clk.Advance(2 * time.Second) // no timer: nothing waits for the key
		other := func() { assert.True(t, h.Now().Expired()) }
		clk.hook.Store(&other) // runs as the Now below reads the clock, before its mutex
		assert.True(t, h.Now().Expired())
		return nil
	}))
	assert.Equal(t, uint64(1), l.tab.Counts().Lapsed, "one lapse settled by two observers counted twice")
	assert.True(t, ProbeTableEmpty(l), "the key did not pass on as the fence ended")
}
