package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/testutil"
)

// An upgrade whose own share has lapsed is not granted when the last other sharer leaves, even
// before the share's timer has run: the shard's timer settles the other sharer first (its deadline
// is earlier), which serves the queue while the upgrading share is past its deadline but not yet
// marked expired. Granting it there would return success for an upgrade whose share had ended
// (docs/DESIGN.md §15.3, §4.3).
func TestUpgradeWhoseShareLapsedIsNotGrantedBeforeItsTimerRuns(t *testing.T) {
	tab := newTestTable(t)
	clk := NewManualClock(time.Unix(1e9, 0))
	l := newTestLocker(t, tab, clk)
	key := []byte("k")
	upgrading, err := l.TryLock(key, testOptions{Shared: true, Lease: 2 * time.Second})
	require.NoError(t, err)
	_, err = l.TryLock(key, testOptions{Shared: true, Lease: time.Second})
	require.NoError(t, err)

	upgraded := make(chan error, 1)
	go func() {
		_, err := upgrading.Upgrade(context.Background(), time.Hour, false)
		upgraded <- err
	}()
	WaitQueued(t, l, key, 1)
	clk.Advance(3 * time.Second) // both leases lapse; the other sharer's is settled first

	err = testutil.Await(t, upgraded, "the end of an upgrade whose share lapsed")
	require.ErrorIs(t, err, ErrLeaseExpired, "an upgrade was granted to a share that had lapsed")
	require.True(t, ProbeTableEmpty(l), "the key stayed held after both leases lapsed")
}
