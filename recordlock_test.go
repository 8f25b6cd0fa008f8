package recordlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

func TestNewRejectsNilDBAndNilClock(t *testing.T) {
	_, err := recordlock.New(nil)
	require.ErrorIs(t, err, recordlock.ErrInvalidOptions)
	_, err = recordlock.New(openDB(t), recordlock.WithClock(nil))
	require.ErrorIs(t, err, recordlock.ErrInvalidOptions)
}

func TestLockersOfOneDatabaseExcludeEachOther(t *testing.T) {
	db := openDB(t)
	clk, a := manual(t, db)
	b := newLocker(t, db, recordlock.WithClock(clk))
	key := []byte("record")

	ha, err := a.TryLock(key, recordlock.Options{})
	require.NoError(t, err)
	_, err = b.TryLock(key, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked)

	got := lockAsync(context.Background(), b, key, wait)
	waitQueued(t, b, key, 1)
	require.True(t, ha.Release())
	r := await(t, got, "Lock")
	require.NoError(t, r.err)
	_, err = a.TryLock(key, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked, "b's handle excludes a")
	require.True(t, r.h.Release())
}

func TestLockersOfTwoDatabasesDoNotInteract(t *testing.T) {
	_, a := manual(t, openDB(t))
	_, b := manual(t, openDB(t))
	key := []byte("record")

	ha, err := a.TryLock(key, recordlock.Options{})
	require.NoError(t, err)
	hb, err := b.TryLock(key, recordlock.Options{})
	require.NoError(t, err)
	assert.False(t, ha.IsExpired())
	assert.False(t, hb.IsExpired())
	// Closing one database's Locker leaves the other's handle alone.
	require.NoError(t, a.Close())
	assert.True(t, ha.IsExpired())
	assert.False(t, hb.IsExpired())
	require.True(t, hb.Release())
}

func TestLockReturnsOnceHolderReleases(t *testing.T) {
	_, l := manual(t, openDB(t))
	key := []byte("k")
	h, err := l.Lock(context.Background(), key, recordlock.Options{})
	require.NoError(t, err)
	got := lockAsync(context.Background(), l, key, wait)
	waitQueued(t, l, key, 1)
	select {
	case <-got:
		t.Fatal("Lock returned while the key was held")
	default:
	}
	require.True(t, h.Release())
	r := await(t, got, "Lock")
	require.NoError(t, r.err)
	assert.Equal(t, key, r.h.Key())
	require.True(t, r.h.Release())
}

func TestLockTimesOut(t *testing.T) {
	clk, l := manual(t, openDB(t))
	key := []byte("k")
	h, err := l.TryLock(key, recordlock.Options{})
	require.NoError(t, err)
	got := lockAsync(context.Background(), l, key, recordlock.Options{Timeout: 2 * time.Second})
	waitQueued(t, l, key, 1)
	clk.Advance(2*time.Second - time.Nanosecond)
	require.Equal(t, 1, recordlock.ProbeQueuedWaiters(l, key), "the waiter gave up before its timeout")
	clk.Advance(time.Nanosecond)
	r := await(t, got, "Lock")
	require.ErrorIs(t, r.err, recordlock.ErrTimeout)
	assert.Nil(t, r.h)
	assert.False(t, h.IsExpired(), "a waiter timing out leaves the holder alone")
	require.True(t, h.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// With a zero Timeout and a ctx that has a deadline, the ctx alone bounds the wait: the
// Locker's clock passing DefaultTimeout, or the ctx's own 45 s, times nothing out. A non-zero
// Timeout and a ctx deadline both apply.
func TestLockZeroTimeoutLeavesCtxDeadlineAlone(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    recordlock.Options
		end     func(h *recordlock.Handle, cancel context.CancelFunc)
		wantErr error
	}{
		{name: "granted when the holder releases", end: func(h *recordlock.Handle, _ context.CancelFunc) { h.Release() }},
		{name: "ends with the ctx", end: func(_ *recordlock.Handle, cancel context.CancelFunc) { cancel() }, wantErr: context.Canceled},
		{name: "a Timeout still applies", opts: recordlock.Options{Timeout: 10 * time.Second}, wantErr: recordlock.ErrTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk, l := manual(t, openDB(t))
			key := []byte("k")
			h, err := l.TryLock(key, recordlock.Options{Lease: recordlock.MaxLease})
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()
			got := lockAsync(ctx, l, key, tc.opts)
			waitQueued(t, l, key, 1)
			if tc.opts.Timeout != 0 {
				clk.Advance(tc.opts.Timeout)
			} else {
				clk.Advance(recordlock.DefaultTimeout + time.Second)
				clk.Advance(time.Minute) // past the ctx's 45 s on the Locker's clock, too
				require.Equal(t, 1, recordlock.ProbeQueuedWaiters(l, key), "the Lock still waits")
				tc.end(h, cancel)
			}
			r := result(t, got)
			if tc.wantErr != nil {
				require.ErrorIs(t, r.err, tc.wantErr)
				assert.Nil(t, r.h)
				require.True(t, h.Release())
			} else {
				require.NoError(t, r.err)
				require.True(t, r.h.Release())
			}
			assert.True(t, recordlock.ProbeTableEmpty(l))
		})
	}
}

func TestLockCancelled(t *testing.T) {
	_, l := manual(t, openDB(t))
	key := []byte("k")
	h, err := l.TryLock(key, recordlock.Options{})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	got := lockAsync(ctx, l, key, wait)
	waitQueued(t, l, key, 1)
	cancel()
	r := await(t, got, "Lock")
	require.ErrorIs(t, r.err, context.Canceled)
	assert.Nil(t, r.h)
	assert.Equal(t, 0, recordlock.ProbeQueuedWaiters(l, key))

	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Millisecond) // real time is the ctx's business
	defer dcancel()
	_, err = l.Lock(dctx, key, wait)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	require.True(t, h.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

func TestLockWithDoneContextFailsEvenForFreeKey(t *testing.T) {
	_, l := manual(t, openDB(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h, err := l.Lock(ctx, []byte("free"), recordlock.Options{})
	require.ErrorIs(t, err, context.Canceled)
	assert.Nil(t, h)
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

func TestTryLockFailsAtOnce(t *testing.T) {
	_, l := manual(t, openDB(t))
	key := []byte("k")
	h, err := l.TryLock(key, recordlock.Options{})
	require.NoError(t, err)
	h2, err := l.TryLock(key, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked)
	assert.Nil(t, h2)
	assert.Equal(t, 0, recordlock.ProbeQueuedWaiters(l, key), "TryLock never queues")
	require.True(t, h.Release())
	h, err = l.TryLock(key, recordlock.Options{})
	require.NoError(t, err)
	require.True(t, h.Release())
}

func TestInvalidKeyLocksNothing(t *testing.T) {
	_, l := manual(t, openDB(t))
	for _, key := range [][]byte{nil, {}} {
		_, err := l.Lock(context.Background(), key, recordlock.Options{})
		require.ErrorIs(t, err, recordlock.ErrInvalidKey)
		_, err = l.TryLock(key, recordlock.Options{})
		require.ErrorIs(t, err, recordlock.ErrInvalidKey)
	}
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

func TestCallerMayReuseKeySlice(t *testing.T) {
	_, l := manual(t, openDB(t))
	buf := []byte("key-one")
	h, err := l.TryLock(buf, recordlock.Options{})
	require.NoError(t, err)
	copy(buf, "key-two")
	assert.Equal(t, []byte("key-one"), h.Key())
	h2, err := l.TryLock(buf, recordlock.Options{})
	require.NoError(t, err, "key-two is a different key")
	_, err = l.TryLock([]byte("key-one"), recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked)
	require.True(t, h.Release())
	require.True(t, h2.Release())

	long := make([]byte, 100)
	long[0] = 'x'
	h, err = l.TryLock(long, recordlock.Options{})
	require.NoError(t, err)
	long[0] = 'y'
	assert.Equal(t, byte('x'), h.Key()[0])
	require.True(t, h.Release())
}

// Waiters queued in a known order acquire in that order, and each release serves exactly one of
// them: the others stay queued and asleep.
func TestWaitersAcquireInArrivalOrder(t *testing.T) {
	clk, l := manual(t, openDB(t))
	key := []byte("k")
	holder, err := l.TryLock(key, recordlock.Options{})
	require.NoError(t, err)

	const n = 6
	got := make([]<-chan lockResult, n)
	for i := range n {
		got[i] = lockAsync(context.Background(), l, key, wait)
		waitQueued(t, l, key, i+1)
	}
	for i := range n {
		if i == 1 {
			// The first waiter was woken to take the key; the others have now waited 1 ms and
			// are handed it directly.
			clk.Advance(time.Millisecond)
		}
		require.True(t, holder.Release())
		assert.LessOrEqual(t, recordlock.ProbeWokenWaiters(l, key), 1, "a release woke more than one waiter")
		r := await(t, got[i], "Lock")
		require.NoError(t, r.err, "waiter %d", i)
		holder = r.h
		for j := i + 1; j < n; j++ {
			select {
			case <-got[j]:
				t.Fatalf("release %d also served waiter %d", i, j)
			default:
			}
		}
		assert.Equal(t, n-i-1, recordlock.ProbeQueuedWaiters(l, key))
		assert.Equal(t, 0, recordlock.ProbeWokenWaiters(l, key), "no waiter but the served one was woken")
	}
	require.True(t, holder.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Once the oldest waiter has waited 1 ms, a release hands it the key directly: a newcomer
// cannot take it, not even in the instant after Release returns.
func TestOldestWaiterNotPassedOverPastOneMillisecond(t *testing.T) {
	clk, l := manual(t, openDB(t))
	key := []byte("k")
	holder, err := l.TryLock(key, recordlock.Options{})
	require.NoError(t, err)
	got := lockAsync(context.Background(), l, key, wait)
	waitQueued(t, l, key, 1)

	clk.Advance(time.Millisecond)
	require.True(t, holder.Release())
	assert.Equal(t, 0, recordlock.ProbeQueuedWaiters(l, key), "Release handed the key over itself")
	_, err = l.TryLock(key, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked, "the key went to the oldest waiter")
	r := await(t, got, "Lock")
	require.NoError(t, r.err)
	require.True(t, r.h.Release())
}

// Within 1 ms a newcomer may barge ahead of the woken waiter; once the waiter has waited 1 ms,
// the barger's release hands it the key directly.
func TestBargerCannotKeepPassingOverWaiter(t *testing.T) {
	clk, l := manual(t, openDB(t))
	key := []byte("k")
	barged := 0
	for range 20 {
		holder, err := l.TryLock(key, recordlock.Options{})
		require.NoError(t, err)
		got := lockAsync(context.Background(), l, key, wait)
		waitQueued(t, l, key, 1)

		require.True(t, holder.Release()) // within 1 ms: the waiter is woken
		if barger, err := l.TryLock(key, recordlock.Options{}); err == nil {
			barged++
			assert.Equal(t, 1, recordlock.ProbeQueuedWaiters(l, key), "the passed-over waiter keeps its place")
			clk.Advance(time.Millisecond)
			require.True(t, barger.Release())
			_, err = l.TryLock(key, recordlock.Options{})
			require.ErrorIs(t, err, recordlock.ErrLocked, "the waiter got the key directly")
		} else {
			require.ErrorIs(t, err, recordlock.ErrLocked)
		}
		r := await(t, got, "Lock")
		require.NoError(t, r.err)
		require.True(t, r.h.Release())
	}
	t.Logf("a newcomer barged ahead of a woken waiter in %d of 20 rounds", barged)
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

func TestCloseReleasesHandlesAndFailsWaiters(t *testing.T) {
	db := openDB(t)
	clk, a := manual(t, db)
	b := newLocker(t, db, recordlock.WithClock(clk))

	var hooks hookCounter
	held, err := a.TryLock([]byte("held"), recordlock.Options{})
	require.NoError(t, err)
	joinHook(t, held, clk, time.Minute, hooks.hook)
	done := held.Done()

	other, err := b.TryLock([]byte("other"), recordlock.Options{})
	require.NoError(t, err)
	waiting := lockAsync(context.Background(), a, []byte("other"), wait)
	waitQueued(t, a, []byte("other"), 1)
	bWaiting := lockAsync(context.Background(), b, []byte("held"), wait)
	waitQueued(t, b, []byte("held"), 1)

	require.NoError(t, a.Close())
	assert.Equal(t, 1, hooks.count(), "Close fires the release hook")
	assert.True(t, recordlock.ProbeClosed(done))
	assert.True(t, held.IsExpired())
	assert.False(t, held.Release())
	r := await(t, waiting, "Lock")
	require.ErrorIs(t, r.err, recordlock.ErrClosed)
	assert.Nil(t, r.h)

	// b was waiting for a's key and now holds it.
	rb := await(t, bWaiting, "Lock")
	require.NoError(t, rb.err)
	require.True(t, rb.h.Release())

	require.NoError(t, a.Close(), "Close is idempotent")
	assert.Equal(t, 1, hooks.count())
	_, err = a.Lock(context.Background(), []byte("x"), recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrClosed)
	_, err = a.TryLock([]byte("x"), recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrClosed)

	// The other Locker keeps working on every key.
	h, err := b.TryLock([]byte("held"), recordlock.Options{})
	require.NoError(t, err)
	require.True(t, h.Release())
	require.True(t, other.Release())
	h, err = b.Lock(context.Background(), []byte("other"), recordlock.Options{})
	require.NoError(t, err)
	require.True(t, h.Release())
	assert.True(t, recordlock.ProbeTableEmpty(b))
}

func TestTimestampStrictlyIncreasing(t *testing.T) {
	db := openDB(t)
	clk, a := manual(t, db)
	b := newLocker(t, db, recordlock.WithClock(clk))
	first := a.Timestamp()
	require.GreaterOrEqual(t, int64(first), epoch.UnixNano(), "wall-anchored")

	const goroutines, each = 8, 2000
	var wg sync.WaitGroup
	seen := make([][]recordlock.Timestamp, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			l := a
			if g%2 == 1 {
				l = b
			}
			for i := range each {
				switch {
				case g == 0 && i == each/2:
					clk.StepWall(-time.Hour)
				case g < 4 && i%10 == 0:
					clk.StepWall(time.Microsecond) // let the wall reading lead now and then
				}
				seen[g] = append(seen[g], l.Timestamp())
			}
		})
	}
	wg.Wait()

	all := map[recordlock.Timestamp]bool{first: true}
	for g, ts := range seen {
		for i, v := range ts {
			if i > 0 {
				require.Greater(t, v, ts[i-1], "goroutine %d, timestamp %d", g, i)
			}
			require.Greater(t, v, first)
			require.False(t, all[v], "timestamp %d minted twice", v)
			all[v] = true
		}
	}
	last := a.Timestamp()
	for v := range all {
		require.Less(t, v, last)
	}
	// A wall clock that stepped back an hour is still behind the last stamp: last+1.
	assert.Equal(t, last+1, b.Timestamp())
}

// Each handle's lease runs on the clock of the Locker that issued it, also when a Locker on
// another clock wants the key.
func TestLeaseRunsOnIssuingLockersClock(t *testing.T) {
	db := openDB(t)
	clkA, a := manual(t, db)
	clkB, b := manual(t, db)
	key := []byte("k")
	h, err := a.TryLock(key, recordlock.Options{Lease: time.Second})
	require.NoError(t, err)

	clkB.Advance(time.Hour)
	_, err = b.TryLock(key, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked, "b's clock does not end a's lease")
	assert.False(t, h.IsExpired())

	got := lockAsync(context.Background(), b, key, recordlock.Options{Timeout: 2 * time.Second})
	waitQueued(t, b, key, 1)
	clkA.Advance(time.Second)
	r := await(t, got, "Lock")
	require.NoError(t, r.err, "a's lease timer handed the key to b's waiter")
	assert.True(t, h.IsLeaseExpired())

	// b's handle lapses on b's clock only.
	clkA.Advance(time.Hour)
	assert.False(t, r.h.IsExpired())
	_, err = a.TryLock(key, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked)
	clkB.Advance(recordlock.DefaultLease)
	h, err = a.TryLock(key, recordlock.Options{})
	require.NoError(t, err)
	assert.True(t, r.h.IsExpired())
	require.True(t, h.Release())
}

// Closing the last Locker of a database drops its table; the next Locker must still mint
// timestamps above every earlier one, even when the wall clock stepped back in between.
func TestTimestampsIncreaseAcrossTableLifetimes(t *testing.T) {
	db := openDB(t)
	clk := recordlock.NewManualClock(epoch)
	first, err := recordlock.New(db, recordlock.WithClock(clk))
	require.NoError(t, err)
	before := first.Timestamp()
	require.NoError(t, first.Close())
	clk.StepWall(-time.Hour)
	second := newLocker(t, db, recordlock.WithClock(clk))
	assert.Greater(t, second.Timestamp(), before)
}
