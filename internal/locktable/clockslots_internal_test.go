package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Close fails a woken waiter of its Locker, and the key then passes over the Locker's other
// waiters too: the table never grants a key to a closed Locker, so no handle of it is scheduled
// after Close and its clock's schedulers, once dropped, stay dropped. A Locker that takes over the
// clock slot runs its timers on its own clock.
func TestClosedLockersClockStaysDropped(t *testing.T) {
	tab := newTestTable(t)
	start := time.Unix(1, 0)
	keep := newTestLocker(t, tab, NewManualClock(start)) // slot 0 for the whole test
	key := []byte("k")
	held, err := keep.TryLock(key, testOptions{})
	require.NoError(t, err)

	deadClock := NewManualClock(start)
	l, err := newLocker(tab, deadClock)
	require.NoError(t, err)
	require.Equal(t, 1, l.ten.clockID)
	const n = 3
	var res []<-chan lockResult
	for i := range n {
		res = append(res, lockAsync(context.Background(), l, key, testOptions{Timeout: time.Minute}))
		WaitQueued(t, keep, key, i+1)
	}
	releaseWokenNotRun(t, held)
	deadClock.Advance(bargeWindow) // the waiters behind the woken one are past the window
	require.NoError(t, l.Close())
	for _, c := range res {
		require.ErrorIs(t, testutil.Await(t, c, "the closed Locker's waiter's return").err, ErrClosed)
	}
	sh := tab.shard(tab.hash(0, key))
	sh.mu.Lock()
	assert.Nil(t, sh.scheduler(1), "no scheduler of the closed Locker's clock came back")
	sh.mu.Unlock()

	// A new Locker takes over slot 1; its wait times out by its own clock.
	clk := NewManualClock(start)
	next := newTestLocker(t, tab, clk)
	require.Equal(t, 1, next.ten.clockID)
	blocker, err := keep.TryLock(key, testOptions{})
	require.NoError(t, err)
	got := lockAsync(context.Background(), next, key, testOptions{Timeout: time.Second})
	WaitQueued(t, keep, key, 1)
	clk.Advance(2 * time.Second)
	require.ErrorIs(t, testutil.Await(t, got, "the timeout on the Locker's own clock").err, ErrTimeout)
	require.True(t, blocker.Release())
}

// Lockers that come and go with clocks of their own leave no clock slot or scheduler behind, and
// a Locker that takes over a freed slot gets working lease timers on its own clock.
func TestClockSlotsReusedWhenLockersClose(t *testing.T) {
	tab := newTestTable(t)
	start := time.Unix(1, 0)
	keep := newTestLocker(t, tab, NewManualClock(start)) // slot 0 for the whole test
	key := []byte("k")
	schedulersOf := func(id int) int {
		n := 0
		for i := range tab.shards {
			sh := &tab.shards[i]
			sh.mu.Lock()
			if id == 0 && sh.firstSched.clock != nil || id > 0 && id-1 < len(sh.moreScheds) && sh.moreScheds[id-1] != nil {
				n++
			}
			sh.mu.Unlock()
		}
		return n
	}

	var released *Claim
	for round := range 20 {
		clk := NewManualClock(start)
		l, err := newLocker(tab, clk)
		require.NoError(t, err)
		require.Equal(t, 1, l.ten.clockID, "round %d: the freed slot is reused", round)
		h, err := l.TryLock(key, testOptions{Lease: time.Second})
		require.NoError(t, err)
		require.Equal(t, ShardCount, schedulersOf(1), "round %d: every shard has the clock's scheduler", round)
		if round%2 == 0 {
			h.Done()                 // watched: armed on this round's clock
			clk.Advance(time.Second) // the lease lapses by the timer of this round's clock
			require.NotZero(t, h.flags()&flagExpired, "round %d: the lease timer on the reused slot fired", round)
		} else {
			released = h
		}
		require.NoError(t, l.Close())
		assert.Zero(t, schedulersOf(1), "round %d: the closed Locker's schedulers are gone", round)
	}
	tab.clocks.mu.Lock()
	assert.Len(t, tab.clocks.slots, 2, "two clocks at a time, two slots")
	tab.clocks.mu.Unlock()

	// A handle of a closed Locker touches no scheduler, so it cannot bring one back.
	released.Revoke()
	assert.Error(t, fence(released, func() error { return nil }))
	assert.Zero(t, schedulersOf(1))

	// The first slot is reset in place and taken over the same way.
	other, err := newLocker(tab, NewManualClock(start))
	require.NoError(t, err)
	defer other.Close()
	require.NoError(t, keep.Close())
	assert.Zero(t, schedulersOf(0))
	clk := NewManualClock(start)
	l := newTestLocker(t, tab, clk)
	require.Equal(t, 0, l.ten.clockID)
	h, err := l.TryLock(key, testOptions{Lease: time.Second})
	require.NoError(t, err)
	h.Done() // watched: armed
	clk.Advance(time.Second)
	assert.NotZero(t, h.flags()&flagExpired, "the lease timer on the reset first slot fired")
}
