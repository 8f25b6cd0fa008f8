package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/testutil"
)

// An Upgrade granted just before its tenant closes, and woken only after, fails with ErrClosed,
// as a waiter's grant does (TestWaiterGrantedAsTheLockerClosesFailsClosed): the wait's own
// outcome, ErrGrantedAfterClose, is not the API's, and Close releases the claim.
func TestUpgradeGrantedAsTheLockerClosesFailsClosed(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1e9, 0)))
	key := []byte("k")
	h, err := l.TryLock(key, testOptions{Shared: true})
	require.NoError(t, err)
	other, err := l.TryLock(key, testOptions{Shared: true})
	require.NoError(t, err)
	res := make(chan error, 1)
	go func() { _, err := h.Upgrade(context.Background(), time.Minute, false); res <- err }()
	WaitQueued(t, l, key, 1)

	releaseAndCloseAtOnce(l, other)

	require.ErrorIs(t, testutil.Await(t, res, "the upgrade's result"), ErrClosed,
		"an upgrade granted as the Locker closed reported the wait's own outcome")
}
