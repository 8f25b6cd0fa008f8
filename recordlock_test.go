package recordlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

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
	r := testutil.Await(t, got, "Lock")
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
	r := testutil.Await(t, got, "Lock")
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
	r := testutil.Await(t, got, "Lock")
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
			r := testutil.Await(t, got, "Lock")
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
	r := testutil.Await(t, got, "Lock")
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
	r := testutil.Await(t, got, "Lock")
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
