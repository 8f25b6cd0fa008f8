package recordlock

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/tempdb"
)

func TestTableEmptyAfterWaitersGiveUp(t *testing.T) {
	db := tempdb.New(t)
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, db, clk)
	key := []byte("k")
	h, err := l.TryLock(key, Options{})
	require.NoError(t, err)
	require.Equal(t, 0, heapLen(l, key), "nobody watches the holder's lease yet")

	// One waiter times out, one is cancelled.
	timedOut := make(chan error, 1)
	go func() {
		_, err := l.Lock(context.Background(), key, Options{Timeout: time.Second})
		timedOut <- err
	}()
	WaitQueued(t, l, key, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error, 1)
	go func() {
		_, err := l.Lock(ctx, key, Options{Timeout: time.Minute})
		cancelled <- err
	}()
	WaitQueued(t, l, key, 2)
	require.Equal(t, 3, heapLen(l, key), "each waiter's timeout, and the holder's lease it watches")

	clk.Advance(time.Second)
	require.ErrorIs(t, <-timedOut, ErrTimeout)
	cancel()
	require.ErrorIs(t, <-cancelled, context.Canceled)

	assert.Equal(t, 0, ProbeQueuedWaiters(l, key))
	assert.Equal(t, 1, heapLen(l, key), "only the holder's lease is left")
	assert.False(t, l.tab.empty())
	require.True(t, h.Release())
	assert.True(t, l.tab.empty())
	assert.True(t, ProbeTableEmpty(l))
}

func TestShardTableShrinksOnceKeysLeave(t *testing.T) {
	db := tempdb.New(t)
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, db, clk)
	keys := keysInShard(l, shrinkAfter+10)
	sh := l.tab.shard(l.tab.hash(0, keys[0]))

	handles := make([]*Handle, 0, len(keys))
	for _, k := range keys {
		h, err := l.TryLock(k, Options{})
		require.NoError(t, err)
		h.Done() // watched: its deadline goes on the heap
		handles = append(handles, h)
	}
	sh.mu.Lock()
	grown, slots, heapCap := sh.index.n, len(sh.index.slots), cap(sh.sched(l).heap)
	sh.mu.Unlock()
	require.Equal(t, len(keys), grown)
	require.Greater(t, slots, shrinkAfter)
	require.Greater(t, heapCap, shrinkAfter)

	for _, h := range handles[1:] {
		require.True(t, h.Release())
	}
	sh.mu.Lock()
	assert.Equal(t, 1, sh.index.n)
	assert.LessOrEqual(t, len(sh.index.slots), 4*minSlots, "the table shrank as its keys left")
	assert.Equal(t, maxSpare, sh.nSpare, "only a few allocated entries are kept for reuse")
	sh.mu.Unlock()

	require.True(t, handles[0].Release())
	sh.mu.Lock()
	assert.Zero(t, sh.index.n)
	assert.Len(t, sh.index.slots, minSlots, "an idle table is back to its idle size")
	assert.Nil(t, sh.spare, "an idle shard keeps no allocated entry")
	assert.Zero(t, sh.nSpare)
	own := 0
	for e := sh.spareOwn; e != nil; e = e.nextSpare {
		assert.True(t, sh.owns(e))
		own++
	}
	assert.Equal(t, len(sh.ownEntries), own, "the shard's own entries are spare again")
	assert.Nil(t, sh.sched(l).heap, "the grown heap is dropped once empty")
	sh.mu.Unlock()

	// The shrunk shard works as before, and finds every key again.
	for _, k := range keys {
		h, err := l.TryLock(k, Options{})
		require.NoError(t, err)
		_, err = l.TryLock(k, Options{})
		require.ErrorIs(t, err, ErrLocked)
		require.True(t, h.Release())
	}
	assert.True(t, ProbeTableEmpty(l))
}

func TestSchedulerRearmsForEarlierDeadline(t *testing.T) {
	db := tempdb.New(t)
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, db, clk)
	keys := keysInShard(l, 2)
	late, early := keys[0], keys[1]
	sh := l.tab.shard(l.tab.hash(0, late))
	armedAt := func() time.Duration {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return sh.sched(l).armedAt
	}

	hLate, err := l.TryLock(late, Options{Lease: 10 * time.Second})
	require.NoError(t, err)
	lateDone := hLate.Done() // watched: armed
	require.Equal(t, 10*time.Second, armedAt())
	hEarly, err := l.TryLock(early, Options{Lease: time.Second})
	require.NoError(t, err)
	earlyDone := hEarly.Done()
	require.Equal(t, time.Second, armedAt(), "an earlier deadline re-arms the timer")

	// Both holders stall; waiters get their keys at each deadline without anyone calling them.
	wLate := make(chan *Handle, 1)
	wEarly := make(chan *Handle, 1)
	go func() {
		h, err := l.Lock(context.Background(), late, Options{Timeout: time.Minute})
		assert.NoError(t, err)
		wLate <- h
	}()
	go func() {
		h, err := l.Lock(context.Background(), early, Options{Timeout: time.Minute})
		assert.NoError(t, err)
		wEarly <- h
	}()
	WaitQueued(t, l, late, 1)
	WaitQueued(t, l, early, 1)

	clk.Advance(time.Second)
	h2 := <-wEarly
	require.NotNil(t, h2)
	assert.True(t, closed(earlyDone))
	assert.False(t, closed(lateDone))
	assert.Equal(t, 10*time.Second, armedAt(), "re-armed for the next deadline after firing")

	clk.Advance(9 * time.Second)
	h1 := <-wLate
	require.NotNil(t, h1)
	assert.True(t, closed(lateDone))
	assert.False(t, hLate.Release())
	assert.False(t, hEarly.Release())
	require.True(t, h1.Release())
	require.True(t, h2.Release())
	assert.True(t, ProbeTableEmpty(l))
}

func TestCloseAbandonsEveryWaiterWhenOneIsHandedTheKey(t *testing.T) {
	db := tempdb.New(t)
	clk := NewManualClock(time.Unix(1, 0))
	a := newTestLocker(t, db, clk)
	b := newTestLocker(t, db, clk)
	key := []byte("k")
	hb, err := b.TryLock(key, Options{})
	require.NoError(t, err)

	const n = 3
	res := make(chan error, n)
	for i := range n {
		go func() {
			_, err := a.Lock(context.Background(), key, Options{Timeout: time.Minute})
			res <- err
		}()
		WaitQueued(t, a, key, i+1)
	}

	// Release hb as Release does, with the oldest waiter woken but not yet scheduled to run.
	sh := b.tab.shard(hb.hash)
	sh.mu.Lock()
	e := hb.e
	hb.setFlags(flagReleased)
	hb.clearFlags(flagHeld)
	sh.unschedule(hb)
	e.holder = nil
	e.wakePending = true
	e.head.state = waitWoken
	sh.mu.Unlock()
	// The second waiter has now waited bargeWindow: abandoning the first hands it the key.
	clk.Advance(bargeWindow)

	require.NoError(t, a.Close())
	for range n {
		select {
		case err := <-res:
			require.ErrorIs(t, err, ErrClosed)
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter of the closed Locker is still queued")
		}
	}
	assert.True(t, b.tab.empty())
	h, err := b.TryLock(key, Options{})
	require.NoError(t, err)
	require.True(t, h.Release())
}

func TestTableDroppedWhenLastLockerCloses(t *testing.T) {
	db := tempdb.New(t)
	clk := NewManualClock(time.Unix(1, 0))
	path := canonicalPath(db.Name())
	registered := func() *table {
		registry.Lock()
		defer registry.Unlock()
		return registry.tables[path]
	}
	a, err := New(db, WithClock(clk))
	require.NoError(t, err)
	b, err := New(db)
	require.NoError(t, err)
	require.Same(t, a.tab, b.tab, "Lockers of one database share a table")
	require.Same(t, a.tab, registered())

	h, err := a.TryLock([]byte("k"), Options{})
	require.NoError(t, err)
	require.NoError(t, a.Close())
	assert.Same(t, b.tab, registered(), "the table stays while a Locker uses it")
	assert.True(t, h.IsExpired())
	require.NoError(t, b.Close())
	assert.Nil(t, registered(), "the last Close drops the table")

	c, err := New(db, WithClock(clk))
	require.NoError(t, err)
	assert.NotSame(t, a.tab, c.tab)
	require.NoError(t, c.Close())
	assert.Nil(t, registered())
}

// A lease timer that finds the table inconsistent logs it once per database and never panics.
func TestKeyTableFaultLoggedOnce(t *testing.T) {
	db := tempdb.New(t)
	clk := NewManualClock(time.Unix(1, 0))
	var logs LogCapture
	l, err := New(db, WithClock(clk), WithLogger(slog.New(&logs)))
	require.NoError(t, err)
	defer l.Close()

	for _, key := range []string{"a", "b"} {
		h, err := l.TryLock([]byte(key), Options{Lease: time.Second})
		require.NoError(t, err)
		h.Done() // watched: the lease timer will find the fault
		sh := h.shard()
		sh.mu.Lock()
		h.e.holder = nil // the table lost track of the holder
		sh.mu.Unlock()
	}
	require.NotPanics(t, func() { clk.Advance(time.Second) })
	assert.Len(t, logs.Records(), 1)
}

// A newcomer may take a released key ahead of the woken oldest waiter only while that waiter has
// waited less than bargeWindow; past it, the waiter is handed the key directly.
func TestBargingWindow(t *testing.T) {
	db := tempdb.New(t)
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, db, clk)
	key := []byte("k")
	lockAsync := func() <-chan *Handle {
		c := make(chan *Handle, 1)
		go func() {
			h, err := l.Lock(context.Background(), key, Options{Timeout: time.Minute})
			assert.NoError(t, err)
			c <- h
		}()
		WaitQueued(t, l, key, 1)
		return c
	}

	t.Run("within the window", func(t *testing.T) {
		holder, err := l.TryLock(key, Options{})
		require.NoError(t, err)
		got := lockAsync()
		w := releaseWokenNotRun(t, holder)
		clk.Advance(bargeWindow - time.Nanosecond)
		barger, err := l.TryLock(key, Options{})
		require.NoError(t, err, "a newcomer may barge within the window")

		w.signal() // the woken waiter finds the key taken and stays at the head of the queue
		require.Eventually(t, func() bool { return ProbeWokenWaiters(l, key) == 0 }, 10*time.Second, 100*time.Microsecond)
		assert.Equal(t, 1, ProbeQueuedWaiters(l, key))

		clk.Advance(time.Nanosecond)
		require.True(t, barger.Release())
		assert.Equal(t, 0, ProbeQueuedWaiters(l, key), "the barger's release handed the key to the waiter")
		_, err = l.TryLock(key, Options{})
		require.ErrorIs(t, err, ErrLocked)
		h := <-got
		require.NotNil(t, h)
		require.True(t, h.Release())
	})

	t.Run("past the window", func(t *testing.T) {
		holder, err := l.TryLock(key, Options{})
		require.NoError(t, err)
		got := lockAsync()
		w := releaseWokenNotRun(t, holder)
		clk.Advance(bargeWindow)
		_, err = l.TryLock(key, Options{})
		require.ErrorIs(t, err, ErrLocked, "the woken waiter has waited bargeWindow: no barging")
		w.signal()
		h := <-got
		require.NotNil(t, h)
		require.True(t, h.Release())
	})
	assert.True(t, ProbeTableEmpty(l))
}

// Lockers that come and go with clocks of their own leave no clock slot or scheduler behind, and
// a Locker that takes over a freed slot gets working lease timers on its own clock.
func TestClockSlotsReusedWhenLockersClose(t *testing.T) {
	db := tempdb.New(t)
	start := time.Unix(1, 0)
	keep := newTestLocker(t, db, NewManualClock(start)) // slot 0 for the whole test
	tab := keep.tab
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

	var released *Handle
	for round := range 20 {
		clk := NewManualClock(start)
		l, err := New(db, WithClock(clk))
		require.NoError(t, err)
		require.Equal(t, 1, l.clockID, "round %d: the freed slot is reused", round)
		h, err := l.TryLock(key, Options{Lease: time.Second})
		require.NoError(t, err)
		require.Equal(t, shardCount, schedulersOf(1), "round %d: every shard has the clock's scheduler", round)
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
	released.RevokeLease()
	assert.Error(t, released.Fence(func() error { return nil }))
	assert.Zero(t, schedulersOf(1))

	// The first slot is reset in place and taken over the same way.
	other, err := New(db, WithClock(NewManualClock(start)))
	require.NoError(t, err)
	defer other.Close()
	require.NoError(t, keep.Close())
	assert.Zero(t, schedulersOf(0))
	clk := NewManualClock(start)
	l := newTestLocker(t, db, clk)
	require.Equal(t, 0, l.clockID)
	h, err := l.TryLock(key, Options{Lease: time.Second})
	require.NoError(t, err)
	h.Done() // watched: armed
	clk.Advance(time.Second)
	assert.NotZero(t, h.flags()&flagExpired, "the lease timer on the reset first slot fired")
}
