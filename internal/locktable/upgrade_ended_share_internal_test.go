package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/testutil"
)

// An upgrade queued behind another sharer whose own share lapses inside a Fence fails as soon as
// the other sharer leaves, while the fence still runs: its share has ended, so it is dropped from
// the head of the queue rather than left there to block the key's waiters until the fence ends
// (docs/DESIGN.md §15.3).
func TestUpgradeWhoseShareEndedInAFenceFailsOnceItIsHead(t *testing.T) {
	tab := newTestTable(t)
	clk := NewManualClock(time.Unix(1e9, 0))
	l := newTestLocker(t, tab, clk)
	key := []byte("k")
	lapsing, err := l.TryLock(key, testOptions{Shared: true, Lease: time.Second})
	require.NoError(t, err)
	other, err := l.TryLock(key, testOptions{Shared: true, Lease: time.Hour})
	require.NoError(t, err)

	// Inside a Fence, a lapsed share keeps the key until the fence ends.
	inFence, endFence := make(chan struct{}), make(chan struct{})
	fenced := make(chan error, 1)
	go func() { fenced <- fence(lapsing, func() error { close(inFence); <-endFence; return nil }) }()
	<-inFence
	defer func() { close(endFence); testutil.Await(t, fenced, "the fence's end") }()
	upgraded := make(chan error, 1)
	go func() {
		_, err := lapsing.Upgrade(context.Background(), time.Hour, false)
		upgraded <- err
	}()
	WaitQueued(t, l, key, 1)
	clk.Advance(2 * time.Second)
	other.Release()

	err = testutil.Await(t, upgraded, "the failure of an upgrade whose share ended, while its fence still runs")
	require.ErrorIs(t, err, ErrLeaseExpired, "an upgrade whose share ended stayed queued at the head of the key")
}
