package otelrecordlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/internal/tempdb"
	"github.com/recordlock/recordlock/otelrecordlock"
)

// TestReportsStats drives every counter through a real Locker on a ManualClock and checks after
// each step that a collection reports what Stats reports, and that Stats moved as the step says.
func TestReportsStats(t *testing.T) {
	ctx := context.Background()
	clk := recordlock.NewManualClock(epoch)
	l := newLocker(t, tempdb.New(t), recordlock.WithClock(clk), quiet)
	reader, mp := newProvider(t)
	register(t, l, mp, otelrecordlock.WithDB("orders"))
	check := func(step string) recordlock.Stats {
		t.Helper()
		s := l.Stats()
		t.Run(step, func(t *testing.T) { assertMatches(t, collect(t, reader), s, "orders") })
		return s
	}

	s := check("at rest")
	assert.Equal(t, recordlock.Stats{}, s)

	// Two uncontended locks.
	a, err := l.Lock(ctx, []byte("a"), recordlock.Options{})
	require.NoError(t, err)
	b, err := l.Lock(ctx, []byte("b"), recordlock.Options{})
	require.NoError(t, err)
	s = check("uncontended")
	assert.Equal(t, 2, s.Held)
	assert.Equal(t, uint64(2), s.Acquired)

	// A contended lock of a that waits 250ms of the ManualClock.
	var waited *recordlock.Handle
	done := lockAsync(func() (err error) {
		waited, err = l.Lock(ctx, []byte("a"), recordlock.Options{Timeout: 10 * time.Second})
		return err
	})
	waitForWaiters(t, l, 1)
	s = check("queued")
	assert.Equal(t, 1, s.Waiting)
	clk.Advance(250 * time.Millisecond)
	require.True(t, a.Release())
	require.NoError(t, result(t, done))
	s = check("contended")
	assert.Equal(t, uint64(1), s.Contended)
	assert.Equal(t, 250*time.Millisecond, s.WaitTime)
	assert.Equal(t, 0, s.Waiting)

	// A Lock of b that times out, and two whose ctx ends the wait.
	done = lockAsync(func() error {
		_, err := l.Lock(ctx, []byte("b"), recordlock.Options{Timeout: 100 * time.Millisecond})
		return err
	})
	waitForWaiters(t, l, 1)
	clk.Advance(100 * time.Millisecond)
	require.ErrorIs(t, result(t, done), recordlock.ErrTimeout)
	for range 2 {
		cctx, cancel := context.WithCancel(ctx)
		done = lockAsync(func() error {
			_, err := l.Lock(cctx, []byte("b"), recordlock.Options{})
			return err
		})
		waitForWaiters(t, l, 1)
		cancel()
		require.ErrorIs(t, result(t, done), context.Canceled)
	}
	s = check("timeout and cancellations")
	assert.Equal(t, uint64(1), s.Timeouts)
	assert.Equal(t, uint64(2), s.Canceled)

	// Two Txns that each wait for the other's key: one of them fails with ErrDeadlock.
	t1, t2 := l.Begin(), l.Begin()
	_, err = t1.Lock(ctx, []byte("x"), recordlock.Options{})
	require.NoError(t, err)
	_, err = t2.Lock(ctx, []byte("y"), recordlock.Options{})
	require.NoError(t, err)
	done = lockAsync(func() error {
		_, err := t1.Lock(ctx, []byte("y"), recordlock.Options{Timeout: 10 * time.Second})
		return err
	})
	waitForWaiters(t, l, 1)
	_, err = t2.Lock(ctx, []byte("x"), recordlock.Options{Timeout: 10 * time.Second})
	require.ErrorIs(t, err, recordlock.ErrDeadlock)
	t2.Rollback()
	require.NoError(t, result(t, done))
	t1.Rollback()
	s = check("deadlock")
	assert.Equal(t, uint64(1), s.Deadlocks)

	// Three leases that lapse with their keys held, and fenced writes refused on them; four
	// revoked leases; a release hook that fails.
	var lapsing []*recordlock.Handle
	for _, k := range []string{"l1", "l2", "l3"} {
		h, err := l.Lock(ctx, []byte(k), recordlock.Options{Lease: recordlock.MinLease})
		require.NoError(t, err)
		lapsing = append(lapsing, h)
	}
	clk.Advance(recordlock.MinLease)
	for _, h := range append(lapsing, lapsing[0]) {
		require.ErrorIs(t, h.Fence(func() error { return nil }), recordlock.ErrLeaseExpired)
	}
	for _, k := range []string{"r1", "r2", "r3", "r4"} {
		h, err := l.Lock(ctx, []byte(k), recordlock.Options{})
		require.NoError(t, err)
		h.RevokeLease()
	}
	h, err := l.Lock(ctx, []byte("hook"), recordlock.Options{})
	require.NoError(t, err)
	require.True(t, h.JoinClusterRound(recordlock.Timestamp(clk.Now().UnixNano()), time.Second, clk.Mono(),
		func() error { return errors.New("hook fails") }))
	require.True(t, h.Release())
	s = check("lapses, fences, revocations, hook failure")
	assert.Equal(t, uint64(3), s.Lapsed)
	assert.Equal(t, uint64(4), s.Fenced)
	assert.Equal(t, uint64(4), s.Revoked)
	assert.Equal(t, uint64(1), s.HookFailures)

	require.True(t, b.Release())
	require.True(t, waited.Release())
	s = check("all released")
	assert.Equal(t, 0, s.Held)
	assert.Equal(t, 0, s.Waiting)
}

// TestUnregister checks that collections after Unregister carry no recordlock metrics, and that
// a second Unregister is harmless.
func TestUnregister(t *testing.T) {
	l := newLocker(t, tempdb.New(t))
	reader, mp := newProvider(t)
	reg := register(t, l, mp)
	h, err := l.Lock(context.Background(), []byte("k"), recordlock.Options{})
	require.NoError(t, err)
	defer h.Release()

	before := collect(t, reader)
	require.Contains(t, before, "recordlock.locks.held")
	assert.Equal(t, map[string]float64{"default": 1}, before["recordlock.locks.held"].values)

	require.NoError(t, reg.Unregister())
	assert.Empty(t, collect(t, reader), "metrics after Unregister")
	assert.Empty(t, collect(t, reader), "metrics at the next collection")
	require.NoError(t, reg.Unregister())
}

// TestSeparateDatabases registers the Lockers of two databases on one MeterProvider: each
// database's figures stay under its own db attribute, and unregistering one leaves the other.
func TestSeparateDatabases(t *testing.T) {
	ctx := context.Background()
	reader, mp := newProvider(t)
	la := newLocker(t, tempdb.New(t))
	lb := newLocker(t, tempdb.New(t))
	register(t, la, mp, otelrecordlock.WithDB("a"))
	regB := register(t, lb, mp, otelrecordlock.WithDB("b"))
	for l, keys := range map[*recordlock.Locker][]string{la: {"k1"}, lb: {"k1", "k2"}} {
		for _, k := range keys {
			h, err := l.Lock(ctx, []byte(k), recordlock.Options{})
			require.NoError(t, err)
			defer h.Release()
		}
	}

	got := collect(t, reader)
	assert.Equal(t, map[string]float64{"a": 1, "b": 2}, got["recordlock.locks.held"].values)
	assert.Equal(t, map[string]float64{"a": 1, "b": 2}, got["recordlock.lock.acquisitions"].values)

	require.NoError(t, regB.Unregister())
	got = collect(t, reader)
	assert.Equal(t, map[string]float64{"a": 1}, got["recordlock.locks.held"].values)
	assertMatches(t, got, la.Stats(), "a")
}

// TestRegisterRefusesNil checks that Register fails, rather than registering a callback that
// would panic at every collection, when the Locker or the MeterProvider is missing.
func TestRegisterRefusesNil(t *testing.T) {
	l := newLocker(t, tempdb.New(t))
	_, mp := newProvider(t)
	for name, call := range map[string]func() (metric.Registration, error){
		"nil Locker":        func() (metric.Registration, error) { return otelrecordlock.Register(nil, mp) },
		"nil MeterProvider": func() (metric.Registration, error) { return otelrecordlock.Register(l, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			reg, err := call()
			assert.Error(t, err)
			assert.Nil(t, reg)
		})
	}
}

// TestWithModes splits the held locks and the waiting requests by mode: sharers and an exclusive
// holder, a writer queued with a reader behind it, and an upgrade waiting for the other sharer.
// At each step every other instrument still reports Stats, and the modes add up to Stats' totals.
func TestWithModes(t *testing.T) {
	ctx := context.Background()
	l := newLocker(t, tempdb.New(t), recordlock.WithClock(recordlock.NewManualClock(epoch)))
	reader, mp := newProvider(t)
	register(t, l, mp, otelrecordlock.WithDB("orders"), otelrecordlock.WithModes())
	shared := recordlock.Options{Shared: true, Timeout: time.Minute}
	check := func(step string, heldX, heldS, waitingX, waitingS float64) {
		t.Helper()
		s := l.Stats()
		t.Run(step, func(t *testing.T) {
			got := collect(t, reader)
			assert.Equal(t, map[string]float64{"orders/exclusive": heldX, "orders/shared": heldS},
				got["recordlock.locks.held"].values, "held")
			assert.Equal(t, map[string]float64{"orders/exclusive": waitingX, "orders/shared": waitingS},
				got["recordlock.lock.waiters"].values, "waiting")
			assert.Equal(t, float64(s.Held), heldX+heldS, "held by mode against Stats.Held")
			assert.Equal(t, float64(s.Waiting), waitingX+waitingS, "waiting by mode against Stats.Waiting")
			for name, w := range want(s) {
				if name == "recordlock.locks.held" || name == "recordlock.lock.waiters" {
					continue
				}
				assert.Equal(t, map[string]float64{"orders": w.values[""]}, got[name].values, name)
			}
		})
	}

	check("at rest", 0, 0, 0, 0)

	// Two sharers of p, one exclusive holder of x.
	var sharers []*recordlock.Handle
	for range 2 {
		h, err := l.Lock(ctx, []byte("p"), shared)
		require.NoError(t, err)
		sharers = append(sharers, h)
	}
	x, err := l.Lock(ctx, []byte("x"), recordlock.Options{})
	require.NoError(t, err)
	check("held", 1, 2, 0, 0)

	// A writer queued for p, and a reader queued behind it.
	var writer, lateReader *recordlock.Handle
	writerDone := lockAsync(func() (err error) {
		writer, err = l.Lock(ctx, []byte("p"), recordlock.Options{Timeout: time.Minute})
		return err
	})
	waitForWaiters(t, l, 1)
	readerDone := lockAsync(func() (err error) {
		lateReader, err = l.Lock(ctx, []byte("p"), shared)
		return err
	})
	waitForWaiters(t, l, 2)
	check("queued", 1, 2, 1, 1)

	// Two Txns share q, and one of them upgrades: the upgrade waits for the other share.
	t1, t2 := l.Begin(), l.Begin()
	defer t1.Rollback()
	_, err = t1.Lock(ctx, []byte("q"), shared)
	require.NoError(t, err)
	_, err = t2.Lock(ctx, []byte("q"), shared)
	require.NoError(t, err)
	upgradeDone := lockAsync(func() error {
		_, err := t1.Lock(ctx, []byte("q"), recordlock.Options{Timeout: time.Minute})
		return err
	})
	waitForWaiters(t, l, 3)
	check("upgrade waiting", 1, 4, 2, 1)

	t2.Rollback()
	require.NoError(t, result(t, upgradeDone))
	check("upgraded", 2, 2, 1, 1)

	for _, h := range sharers {
		require.True(t, h.Release())
	}
	require.NoError(t, result(t, writerDone))
	check("writer granted", 3, 0, 0, 1)
	require.True(t, writer.Release())
	require.NoError(t, result(t, readerDone))
	check("reader granted", 2, 1, 0, 0)
	require.True(t, lateReader.Release())
	require.True(t, x.Release())
	t1.Rollback()
	check("all released", 0, 0, 0, 0)
}
