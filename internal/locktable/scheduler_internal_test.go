package locktable

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// signallingClock is a ManualClock that reports, once armed, the next time a Lock reads it.
type signallingClock struct {
	*ManualClock
	read chan struct{} // when set, closed and cleared at the next reading
}

func (c *signallingClock) nowMono() (int64, time.Duration) {
	wall, mono := c.ManualClock.nowMono()
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
		assert.True(t, testutil.Closed(done), "the lease timer fired at the deadline")
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
		require.ErrorIs(t, testutil.Await(t, got, "the wait's timeout"), ErrTimeout)
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
	r2 := testutil.Await(t, wEarly, "the grant at the early deadline")
	require.NoError(t, r2.err)
	h2 := r2.h
	require.NotNil(t, h2)
	assert.True(t, testutil.Closed(earlyDone))
	assert.False(t, testutil.Closed(lateDone))
	assert.Equal(t, 10*time.Second, armedAt(), "re-armed for the next deadline after firing")

	clk.Advance(9 * time.Second)
	r1 := testutil.Await(t, wLate, "the grant at the late deadline")
	require.NoError(t, r1.err)
	h1 := r1.h
	require.NotNil(t, h1)
	assert.True(t, testutil.Closed(lateDone))
	assert.False(t, hLate.Release())
	assert.False(t, hEarly.Release())
	require.True(t, h1.Release())
	require.True(t, h2.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// A lease's deadline is armed on a timer only once someone can observe it: a waiter on its key,
// a call of Done, or a release hook. Until then it costs no scheduling, and every check reads the
// deadline itself.

// An uncontended lock puts nothing on the deadline heap; a waiter that queues arms its holder's
// deadline.
func TestUnwatchedLeaseIsNotScheduled(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	key := []byte("k")
	h, err := l.TryLock(key, testOptions{Lease: time.Second})
	require.NoError(t, err)
	assert.Zero(t, l.tab.Deadlines(), "nobody watches the lease")

	waiter := lockAsync(context.Background(), l, key, testOptions{Timeout: time.Minute})
	WaitQueued(t, l, key, 1)
	assert.Equal(t, 2, l.tab.Deadlines(), "the holder's deadline and the wait's timeout")
	require.True(t, h.Release())
	got := granted(t, waiter, "the waiter")
	assert.Zero(t, l.tab.Deadlines(), "the new holder has nobody waiting")
	require.True(t, got.Release())
}

// A holder that stalls past its deadline with nobody waiting keeps the key in the table until
// someone looks; a waiter that arrives later, while the lease is still live, gets the key at the
// deadline without the holder calling anything.
func TestLateWaiterHandedOverAtDeadline(t *testing.T) {
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, newTestTable(t), clk)
	key := []byte("k")
	h, err := l.TryLock(key, testOptions{Lease: time.Second})
	require.NoError(t, err)
	clk.Advance(900 * time.Millisecond)

	waiter := lockAsync(context.Background(), l, key, testOptions{Timeout: time.Minute})
	WaitQueued(t, l, key, 1)
	clk.Advance(99 * time.Millisecond)
	require.True(t, testutil.NotReturned(waiter), "the waiter got the key before the deadline")
	clk.Advance(time.Millisecond) // the deadline
	got := granted(t, waiter, "the waiter")
	assert.True(t, h.Now().Expired())
	assert.False(t, h.Release())
	require.True(t, got.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// Done called late on a stalled hold still closes at the deadline, by its timer.
func TestLateDoneClosesAtDeadline(t *testing.T) {
	clk := NewManualClock(time.Unix(1, 0))
	tab := newTestTable(t)
	l := newTestLocker(t, tab, clk)
	key := []byte("k")
	h, err := l.TryLock(key, testOptions{Lease: time.Second})
	require.NoError(t, err)
	clk.Advance(900 * time.Millisecond)
	done := h.Done()
	assert.Equal(t, 1, tab.Deadlines(), "Done armed the deadline")
	clk.Advance(99 * time.Millisecond)
	assert.False(t, testutil.Closed(done))
	clk.Advance(time.Millisecond)
	assert.True(t, testutil.Closed(done), "closed at the deadline without another call")
	other := newTestLocker(t, tab, clk)
	h2, err := other.TryLock(key, testOptions{})
	require.NoError(t, err, "the timer gave the key back")
	require.True(t, h2.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// A lapse nobody watched is settled, and counted, by the next look at the key.
func TestUnwatchedLapseSettledByNextLook(t *testing.T) {
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, newTestTable(t), clk)
	key := []byte("k")
	h, err := l.TryLock(key, testOptions{Lease: time.Second})
	require.NoError(t, err)
	clk.Advance(time.Second)
	assert.Zero(t, l.tab.Counts().Lapsed, "nothing looked yet")
	h2, err := l.TryLock(key, testOptions{})
	require.NoError(t, err, "a lapsed key is free before any timer runs")
	assert.Equal(t, uint64(1), l.tab.Counts().Lapsed)
	assert.True(t, h.Now().Expired())
	require.True(t, h2.Release())
}

// TestTimersExpireStalledHoldersInDeadlineOrder takes 300 keys with leases in shuffled order, so
// that every shard's deadline heap sees deadlines arrive earlier and later than its head, and
// releases a third of them early. Then it moves the clock one step at a time: each remaining lease
// must end exactly at the step of its deadline, by the shard timers alone (nothing else is called
// on the holds).
func TestTimersExpireStalledHoldersInDeadlineOrder(t *testing.T) {
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, newTestTable(t), clk)
	const n, steps = 300, 50
	const minLease = 100 * time.Millisecond // the API's MinLease
	step := 100 * time.Millisecond
	rng := rand.New(rand.NewPCG(1, 2))
	type held struct {
		h        *Claim
		done     <-chan struct{}
		lease    time.Duration
		released bool
		endedAt  time.Duration // elapsed time at which done was first seen closed, -1 before
	}
	key := func(i int) []byte { return fmt.Appendf(nil, "record/%d", i) }
	hs := make([]held, n)
	for i, p := range rng.Perm(n) {
		lease := minLease + time.Duration(p%steps)*step
		h, err := l.TryLock(key(i), testOptions{Lease: lease})
		require.NoError(t, err)
		hs[i] = held{h: h, done: h.Done(), lease: lease, endedAt: -1}
	}
	for i := 0; i < n; i += 3 {
		require.True(t, hs[i].h.Release())
		hs[i].released = true
	}

	for elapsed := time.Duration(0); elapsed <= minLease+steps*step; elapsed += step {
		for i := range hs {
			if x := &hs[i]; !x.released && x.endedAt < 0 && testutil.Closed(x.done) {
				x.endedAt = elapsed
			}
		}
		clk.Advance(step)
	}
	for i, x := range hs {
		if !x.released {
			assert.Equal(t, x.lease, x.endedAt, "key %d: its lease ended at the wrong step", i)
		}
		assert.True(t, testutil.Closed(x.done), "key %d", i)
		assert.False(t, x.h.Release(), "key %d: released before, or its lease lapsed", i)
	}
	for i := range n {
		h, err := l.TryLock(key(i), testOptions{})
		require.NoError(t, err, "key %d is free again", i)
		require.True(t, h.Release())
	}
	assert.True(t, ProbeTableEmpty(l))
}
