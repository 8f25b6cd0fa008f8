package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// signallingClock is a ManualClock that reports, once armed, the next time a Lock reads it.
type signallingClock struct {
	*ManualClock
	read chan struct{} // when set, closed and cleared at the next reading
}

func (c *signallingClock) NowMono() (int64, time.Duration) {
	wall, mono := c.ManualClock.NowMono()
	if c.read != nil {
		close(c.read)
		c.read = nil
	}
	return wall, mono
}

// stallAfterReading runs lock in a goroutine that reads the clock and then queues for the mutex of
// key's shard, which the test holds while the clock moves on by stall.
func stallAfterReading(t *testing.T, l *testLocker, clk *signallingClock, key []byte, stall time.Duration, lock func()) {
	t.Helper()
	sh := l.tab.shard(l.tab.hash(0, key))
	read := make(chan struct{})
	clk.read = read
	sh.mu.Lock()
	go lock()
	<-read
	clk.Advance(stall)
	sh.mu.Unlock()
}

// A deadline is measured from the clock reading it is stored with, and its timer fires no later
// than the deadline, however long the Lock queued for the shard mutex after reading the clock.
func TestTimersFireByDeadlineDespiteMutexWait(t *testing.T) {
	tab := newTestTable(t)
	key := []byte("k")

	t.Run("lease", func(t *testing.T) {
		clk := &signallingClock{ManualClock: NewManualClock(time.Unix(1, 0))}
		l := newTestLocker(t, tab, clk)
		got := make(chan *Claim, 1)
		stallAfterReading(t, l, clk, key, 500*time.Millisecond, func() {
			h, err := l.TryLock(key, testOptions{Lease: time.Second})
			assert.NoError(t, err)
			got <- h
		})
		h := <-got
		require.NotNil(t, h)
		done := h.Done()
		clk.Advance(500 * time.Millisecond) // the deadline: one lease after the Lock's reading
		assert.True(t, closed(done), "the lease timer fired at the deadline")
		assert.True(t, ProbeTableEmpty(l))
	})

	t.Run("wait", func(t *testing.T) {
		clk := &signallingClock{ManualClock: NewManualClock(time.Unix(1, 0))}
		l := newTestLocker(t, tab, clk)
		holder, err := l.TryLock(key, testOptions{})
		require.NoError(t, err)
		got := make(chan error, 1)
		stallAfterReading(t, l, clk, key, 500*time.Millisecond, func() {
			_, err := l.Lock(context.Background(), key, testOptions{Timeout: time.Second})
			got <- err
		})
		WaitQueued(t, l, key, 1)
		clk.Advance(500 * time.Millisecond) // the wait's end: one Timeout after the Lock's reading
		require.ErrorIs(t, Await(t, got, "the wait's timeout"), ErrTimeout)
		require.True(t, holder.Release())
	})
}

// Once a scheduler's heap outgrows the storage inside the shard, that storage keeps no pointer to
// a handle: an idle shard pins no dead handle, and so no closed Locker.
func TestSchedulerKeepsNoStaleHandles(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
	keys := keysInShard(l, 3)
	sh := l.tab.shard(l.tab.hash(0, keys[0]))
	var hs []*Claim
	for _, k := range keys {
		h, err := l.TryLock(k, testOptions{})
		require.NoError(t, err)
		hs = append(hs, h)
	}
	for _, h := range hs {
		require.True(t, h.Release())
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	assert.Empty(t, sh.firstSched.heap)
	assert.Equal(t, [2]*Claim{}, sh.firstSched.own, "the shard's own heap storage points to no handle")
}

func TestSchedulerRearmsForEarlierDeadline(t *testing.T) {
	tab := newTestTable(t)
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, tab, clk)
	keys := keysInShard(l, 2)
	late, early := keys[0], keys[1]
	sh := l.tab.shard(l.tab.hash(0, late))
	armedAt := func() time.Duration {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return sh.sched(l).armedAt
	}

	hLate, err := l.TryLock(late, testOptions{Lease: 10 * time.Second})
	require.NoError(t, err)
	lateDone := hLate.Done() // watched: armed
	require.Equal(t, 10*time.Second, armedAt())
	hEarly, err := l.TryLock(early, testOptions{Lease: time.Second})
	require.NoError(t, err)
	earlyDone := hEarly.Done()
	require.Equal(t, time.Second, armedAt(), "an earlier deadline re-arms the timer")

	// Both holders stall; waiters get their keys at each deadline without anyone calling them.
	wLate := lockAsync(context.Background(), l, late, testOptions{Timeout: time.Minute})
	wEarly := lockAsync(context.Background(), l, early, testOptions{Timeout: time.Minute})
	WaitQueued(t, l, late, 1)
	WaitQueued(t, l, early, 1)

	clk.Advance(time.Second)
	r2 := Await(t, wEarly, "the grant at the early deadline")
	require.NoError(t, r2.err)
	h2 := r2.h
	require.NotNil(t, h2)
	assert.True(t, closed(earlyDone))
	assert.False(t, closed(lateDone))
	assert.Equal(t, 10*time.Second, armedAt(), "re-armed for the next deadline after firing")

	clk.Advance(9 * time.Second)
	r1 := Await(t, wLate, "the grant at the late deadline")
	require.NoError(t, r1.err)
	h1 := r1.h
	require.NotNil(t, h1)
	assert.True(t, closed(lateDone))
	assert.False(t, hLate.Release())
	assert.False(t, hEarly.Release())
	require.True(t, h1.Release())
	require.True(t, h2.Release())
	assert.True(t, ProbeTableEmpty(l))
}
