package locktable

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/testutil"
)

// A Fence on a claim released before it no longer has a key for Close to wait on, so it
// registers with its Locker's stray fences; once the Locker has closed, that registration is
// refused and the commit does not run: no fenced write lands after Close returned (docs/DESIGN.md
// §5.1, §11).
func TestFenceOfAReleasedClaimAfterCloseIsRefused(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1e9, 0)))
	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Hour})
	require.NoError(t, err)
	require.True(t, h.Release())
	require.NoError(t, l.Close())

	ran := false
	err = fence(h, func() error { ran = true; return nil })
	require.ErrorIs(t, err, ErrClosed, "a Fence of a released claim ran after its Locker closed")
	require.False(t, ran, "the commit of a released claim's Fence ran after its Locker closed")
}

// A Fence of a released claim that has ended no longer counts among its Locker's stray fences:
// Close, which waits for those that run, returns (docs/DESIGN.md §11).
func TestCloseReturnsAfterAReleasedClaimsFenceEnded(t *testing.T) {
	tab := newTestTable(t)
	l, err := newLocker(tab, NewManualClock(time.Unix(1e9, 0))) // closed below, and only there
	require.NoError(t, err)
	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Hour})
	require.NoError(t, err)
	require.True(t, h.Release())
	require.NoError(t, fence(h, func() error { return nil }))

	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	require.NoError(t, testutil.Await(t, closed, "Close after a released claim's fence ended"))
}
