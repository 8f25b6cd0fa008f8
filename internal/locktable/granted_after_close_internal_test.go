package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/testutil"
)

// A waiter granted its key just before the Locker closes, and woken only after, fails with
// ErrClosed and gives the key back: Close releases what the Locker holds, so no grant may come
// out of it (docs/DESIGN.md §11).
func TestWaiterGrantedAsTheLockerClosesFailsClosed(t *testing.T) {
	tab := newTestTable(t)
	clk := NewManualClock(time.Unix(1e9, 0))
	l := newTestLocker(t, tab, clk)
	key := []byte("k")
	holder, err := l.TryLock(key, testOptions{Lease: time.Hour})
	require.NoError(t, err)
	res := lockAsync(context.Background(), l, key, testOptions{Lease: time.Hour})
	WaitQueued(t, l, key, 1)
	clk.Advance(2 * bargeWindow) // granted directly, not woken to compete with newcomers

	releaseAndCloseAtOnce(l, holder)

	r := testutil.Await(t, res, "the waiter's result")
	require.ErrorIs(t, r.err, ErrClosed, "a waiter granted as the Locker closed was handed a claim Close would not release")
	require.True(t, ProbeTableEmpty(l), "the key granted as the Locker closed was not given back")
}

// releaseAndCloseAtOnce releases holder and marks l closed under one hold of holder's shard's
// mutex, so that what waits for holder's key is granted it and finds l closed as it wakes.
func releaseAndCloseAtOnce(l *testLocker, holder *Claim) {
	sh := holder.shard()
	sh.mu.Lock()
	sh.unschedule(holder)
	sh.giveBack(holder, flagReleased)
	l.ten.closed.Store(true)
	sh.unlockAndRunDeferred()
}
