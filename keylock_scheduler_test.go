package recordlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// A lease's deadline is armed on a timer only once someone can observe it: a waiter on its key,
// a call of Done, or a release hook. Until then it costs no scheduling, and every check reads the
// deadline itself.

// An uncontended lock puts nothing on the deadline heap; a waiter that queues arms its holder's
// deadline.
func TestUnwatchedLeaseIsNotScheduled(t *testing.T) {
	db := openDB(t)
	_, l := manual(t, db)
	h, err := l.TryLock([]byte("k"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	assert.Zero(t, recordlock.ProbeDeadlines(l), "nobody watches the lease")

	waiter := lockAsync(context.Background(), l, []byte("k"), recordlock.Options{Timeout: time.Minute})
	waitQueued(t, l, []byte("k"), 1)
	assert.Equal(t, 2, recordlock.ProbeDeadlines(l), "the holder's deadline and the wait's timeout")
	require.True(t, h.Release())
	got := await(t, waiter, "Lock")
	require.NoError(t, got.err)
	assert.Zero(t, recordlock.ProbeDeadlines(l), "the new holder has nobody waiting")
	require.True(t, got.h.Release())
}

// A holder that stalls past its deadline with nobody waiting keeps the key in the table until
// someone looks; a waiter that arrives later, while the lease is still live, gets the key at the
// deadline without the holder calling anything.
func TestLateWaiterHandedOverAtDeadline(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	h, err := l.TryLock([]byte("k"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	clk.Advance(900 * time.Millisecond)

	waiter := lockAsync(context.Background(), l, []byte("k"), recordlock.Options{Timeout: time.Minute})
	waitQueued(t, l, []byte("k"), 1)
	clk.Advance(99 * time.Millisecond)
	require.True(t, notReturned(waiter), "the waiter got the key before the deadline")
	clk.Advance(time.Millisecond) // the deadline
	got := await(t, waiter, "Lock")
	require.NoError(t, got.err)
	assert.True(t, h.IsLeaseExpired())
	assert.False(t, h.Release())
	require.True(t, got.h.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Done called late on a stalled handle still closes at the deadline, by its timer.
func TestLateDoneClosesAtDeadline(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	h, err := l.TryLock([]byte("k"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	clk.Advance(900 * time.Millisecond)
	done := h.Done()
	assert.Equal(t, 1, recordlock.ProbeDeadlines(l), "Done armed the deadline")
	clk.Advance(99 * time.Millisecond)
	assert.False(t, recordlock.ProbeClosed(done))
	clk.Advance(time.Millisecond)
	assert.True(t, recordlock.ProbeClosed(done), "closed at the deadline without another call")
	other := newLocker(t, db, recordlock.WithClock(clk))
	h2, err := other.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err, "the timer gave the key back")
	require.True(t, h2.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A round's release hook fires at the deadline without anyone looking: joining a round arms it.
func TestJoinedRoundArmsItsDeadline(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	h, err := l.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err)
	var hook hookCounter
	joinHook(t, h, clk, time.Second, hook.hook)
	clk.Advance(time.Second)
	assert.Equal(t, 1, hook.count(), "the hook fired at the round's deadline")
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A lapse nobody watched is settled, and counted, by the next look at the key.
func TestUnwatchedLapseSettledByNextLook(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	h, err := l.TryLock([]byte("k"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	clk.Advance(time.Second)
	assert.Zero(t, l.Stats().Lapsed, "nothing looked yet")
	h2, err := l.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err, "a lapsed key is free before any timer runs")
	assert.Equal(t, uint64(1), l.Stats().Lapsed)
	assert.True(t, h.IsLeaseExpired())
	require.True(t, h2.Release())
}

// TestTimersExpireStalledHoldersInDeadlineOrder takes 300 keys with leases in shuffled order, so
// that every shard's deadline heap sees deadlines arrive earlier and later than its head, and
// releases a third of them early. Then it moves the clock one step at a time: each remaining lease
// must end exactly at the step of its deadline, by the shard timers alone (nothing else is called
// on the handles).
func TestTimersExpireStalledHoldersInDeadlineOrder(t *testing.T) {
	clk, l := manual(t, openDB(t))
	const n, steps = 300, 50
	step := 100 * time.Millisecond
	rng := rand.New(rand.NewPCG(1, 2))
	type held struct {
		h        *recordlock.Handle
		done     <-chan struct{}
		lease    time.Duration
		released bool
		endedAt  time.Duration // elapsed time at which done was first seen closed, -1 before
	}
	key := func(i int) []byte { return fmt.Appendf(nil, "record/%d", i) }
	hs := make([]held, n)
	for i, p := range rng.Perm(n) {
		lease := recordlock.MinLease + time.Duration(p%steps)*step
		h, err := l.TryLock(key(i), recordlock.Options{Lease: lease, Scope: recordlock.ScopeNode})
		require.NoError(t, err)
		hs[i] = held{h: h, done: h.Done(), lease: lease, endedAt: -1}
	}
	for i := 0; i < n; i += 3 {
		require.True(t, hs[i].h.Release())
		hs[i].released = true
	}

	for elapsed := time.Duration(0); elapsed <= recordlock.MinLease+steps*step; elapsed += step {
		for i := range hs {
			if x := &hs[i]; !x.released && x.endedAt < 0 && recordlock.ProbeClosed(x.done) {
				x.endedAt = elapsed
			}
		}
		clk.Advance(step)
	}
	for i, x := range hs {
		if !x.released {
			assert.Equal(t, x.lease, x.endedAt, "key %d: its lease ended at the wrong step", i)
		}
		assert.True(t, recordlock.ProbeClosed(x.done), "key %d", i)
		assert.False(t, x.h.Release(), "key %d: released before, or its lease lapsed", i)
	}
	for i := range n {
		h, err := l.TryLock(key(i), recordlock.Options{Scope: recordlock.ScopeNode})
		require.NoError(t, err, "key %d is free again", i)
		require.True(t, h.Release())
	}
	assert.True(t, recordlock.ProbeTableEmpty(l))
}
