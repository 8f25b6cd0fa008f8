package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A claim that holds no key to pass on settles no lapse (docs/DESIGN.md §4.3): one never granted,
// and one released by its own fence's commit whose lease lapses before the fence ends, which a
// request for the key then looks at. Neither counts a lapse or gives a key back.
func TestLapseOfAClaimWithNoKeyToPassOnSettlesNothing(t *testing.T) {
	clk := NewManualClock(time.Unix(1e9, 0))
	l, log := newLoggedTestLocker(t, clk)
	key := []byte("k")
	h, err := l.TryLock(key, testOptions{Lease: time.Second})
	require.NoError(t, err)

	never := l.newClaim(key, testOptions{}, nil)
	_, err = never.Acquire(context.Background(), time.Second, time.Second, false, false)
	require.ErrorIs(t, err, ErrLocked)
	clk.Advance(time.Millisecond)
	never.Now() // its deadline, never set, has passed
	require.NoError(t, fence(h, func() error {
		require.True(t, h.Release())
		clk.Advance(2 * time.Second) // the lease lapses after the Release, inside the fence
		_, err := l.TryLock(key, testOptions{})
		assert.ErrorIs(t, err, ErrLocked, "the key passes on as the fence ends")
		return nil
	}))
	assert.Zero(t, l.tab.Counts().Lapsed, "a claim with no key to pass on counted a lapse")
	assert.NotContains(t, log.String(), "key table fault", "a claim with no key to pass on gave a key back")
	assert.True(t, ProbeTableEmpty(l))
}
