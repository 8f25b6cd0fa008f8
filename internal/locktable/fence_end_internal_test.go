package locktable

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/testutil"
)

// newLoggedTestLocker is newTestLocker on a table of its own whose log the test reads: a key
// given back twice is logged as a fault and otherwise leaves the key as found.
func newLoggedTestLocker(t *testing.T, clk Clock) (*testLocker, *testutil.LogBuffer) {
	t.Helper()
	out := &testutil.LogBuffer{}
	l := openTestLocker(newTestTable(t), clk, slog.New(slog.NewTextHandler(out, nil)))
	t.Cleanup(func() { l.Close() })
	return l, out
}

// A lease that lapses inside a Fence passes its key on when the fence ends, and its release hook
// fires then, once (docs/DESIGN.md §5.1): the lapse settled inside the fence deferred both.
func TestLapseInsideAFenceFiresTheHookAsTheFenceEnds(t *testing.T) {
	clk := NewManualClock(time.Unix(1e9, 0))
	l := newTestLocker(t, newTestTable(t), clk)
	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Minute})
	require.NoError(t, err)
	var fired atomic.Int32
	require.True(t, h.JoinRound(Round{TsR: 1_000_000, Token: 1, MintedMono: clk.Mono(), Lease: time.Minute,
		Hook: func() error { fired.Add(1); return nil }}))

	require.NoError(t, fence(h, func() error {
		clk.Advance(2 * time.Minute) // the lease lapses while the commit runs
		assert.Zero(t, fired.Load(), "the hook fired while the fence still ran")
		return nil
	}))
	assert.Equal(t, int32(1), fired.Load(), "the release hook of a lease that lapsed inside a fence did not fire as the fence ended")
	assert.True(t, ProbeTableEmpty(l), "the key of a lease that lapsed inside a fence stayed held")
}

// A claim released by its own fence's commit gives its key back once, as that fence ends: a later
// Fence of the released claim (a stray one) passes nothing on again (docs/DESIGN.md §5.1).
func TestFenceAfterAReleaseInOwnFenceGivesNothingBackAgain(t *testing.T) {
	l, log := newLoggedTestLocker(t, NewManualClock(time.Unix(1e9, 0)))
	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Hour})
	require.NoError(t, err)
	require.NoError(t, fence(h, func() error { require.True(t, h.Release()); return nil }))
	other, err := l.TryLock([]byte("k"), testOptions{Lease: time.Hour})
	require.NoError(t, err, "the key did not pass on as the fence ended")

	require.NoError(t, fence(h, func() error { return nil }))
	assert.NotContains(t, log.String(), "key table fault", "a second fence of the claim gave its key back again")
	assert.True(t, other.Release())
}

// FenceTrustedThenRelease of a claim released before it (a Txn's commit fences the handle of a
// staged write even once released) releases nothing more as the fence ends (docs/DESIGN.md §5.1).
func TestFenceThenReleaseOfAReleasedClaimGivesNothingBack(t *testing.T) {
	l, log := newLoggedTestLocker(t, NewManualClock(time.Unix(1e9, 0)))
	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Hour})
	require.NoError(t, err)
	require.True(t, h.Release())
	other, err := l.TryLock([]byte("k"), testOptions{Lease: time.Hour})
	require.NoError(t, err)

	require.NoError(t, h.FenceTrustedThenRelease(func() error { return nil }))
	assert.NotContains(t, log.String(), "key table fault", "the fence's release gave back a key the claim no longer held")
	assert.True(t, other.Release())
}
