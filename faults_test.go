package recordlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// TestCloseWhileThousandWait closes a Locker while 1,000 Lock calls wait on a key it holds: every
// one returns ErrClosed within a second although its Timeout is five minutes, the held handle's
// hook fires once, another Locker's waiter queued behind them gets the key, and nothing is left:
// no goroutine, no table entry, no scheduled deadline.
func TestCloseWhileThousandWait(t *testing.T) {
	const waiters = 1000
	base := runtime.NumGoroutine()
	db := openDB(t)
	clk := recordlock.NewManualClock(epoch)
	l := newLocker(t, db, recordlock.WithClock(clk))
	other := newLocker(t, db, recordlock.WithClock(clk))
	key := []byte("busy")
	ctx := context.Background()

	h, err := l.TryLock(key, node)
	require.NoError(t, err)
	var hooks atomic.Int32
	require.True(t, h.JoinClusterRound(l.Timestamp(), recordlock.MaxLease, clk.Mono(), func() error { hooks.Add(1); return nil }))

	errs := make(chan error, waiters)
	wait := recordlock.Options{Scope: recordlock.ScopeNode, Timeout: recordlock.MaxTimeout}
	for range waiters {
		go func() {
			_, err := l.Lock(ctx, key, wait)
			errs <- err
		}()
	}
	waitUntil(t, "1,000 waiters queued", func() bool { return recordlock.ProbeQueuedWaiters(l, key) == waiters })
	survivor := make(chan *recordlock.Handle, 1)
	go func() {
		h, err := other.Lock(ctx, key, wait)
		assert.NoError(t, err)
		survivor <- h
	}()
	waitUntil(t, "the other Locker's waiter queued", func() bool { return recordlock.ProbeQueuedWaiters(l, key) == waiters+1 })

	start := time.Now()
	require.NoError(t, l.Close())
	within := time.NewTimer(time.Second)
	defer within.Stop()
	for i := range waiters {
		select {
		case err := <-errs:
			require.ErrorIs(t, err, recordlock.ErrClosed)
		case <-within.C:
			t.Fatalf("%d of %d waiters still blocked a second after Close", waiters-i, waiters)
		}
	}
	t.Logf("%d waiters returned %v after Close", waiters, time.Since(start))

	assert.Equal(t, int32(1), hooks.Load(), "the held handle's hook fires once")
	assert.True(t, h.IsExpired())
	assert.False(t, h.IsLeaseExpired(), "Close releases; it does not revoke")
	h2 := <-survivor
	require.NotNil(t, h2)
	assert.True(t, h2.Release())
	_, err = l.Lock(ctx, key, node)
	require.ErrorIs(t, err, recordlock.ErrClosed)
	assert.True(t, recordlock.ProbeTableEmpty(other))
	assert.Zero(t, recordlock.ProbeDeadlines(other))
	require.NoError(t, other.Close())
	settleGoroutines(t, base)
}

// TestFIFOOrderOfTenThousandWaiters queues 10,000 Lock calls on one key one at a time and checks
// they are served exactly in arrival order, both when each release hands the key straight to the
// oldest waiter (it has waited past the barging window) and when it wakes the oldest waiter to
// take it (no newcomer competes).
func TestFIFOOrderOfTenThousandWaiters(t *testing.T) {
	const waiters = 10_000
	for _, handoff := range []bool{true, false} {
		t.Run(fmt.Sprintf("handoff=%v", handoff), func(t *testing.T) {
			base := runtime.NumGoroutine()
			db := openDB(t)
			clk, l := manual(t, db)
			key := []byte("queue")
			h, err := l.TryLock(key, recordlock.Options{Scope: recordlock.ScopeNode, Lease: recordlock.MaxLease})
			require.NoError(t, err)

			var mu sync.Mutex
			order := make([]int, 0, waiters)
			var wg sync.WaitGroup
			wait := recordlock.Options{Scope: recordlock.ScopeNode, Timeout: recordlock.MaxTimeout}
			for i := range waiters {
				wg.Go(func() {
					h, err := l.Lock(context.Background(), key, wait)
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					assert.True(t, h.Release())
				})
				waitUntil(t, fmt.Sprintf("waiter %d queued", i), func() bool { return recordlock.ProbeQueuedWaiters(l, key) == i+1 })
			}
			if handoff {
				clk.Advance(time.Millisecond) // every waiter has now waited the whole barging window
			}
			require.True(t, h.Release())
			wg.Wait()

			require.Len(t, order, waiters)
			for i, got := range order {
				if got != i {
					t.Fatalf("position %d was served to waiter %d: not FIFO", i, got)
				}
			}
			assert.True(t, recordlock.ProbeTableEmpty(l))
			assert.Zero(t, recordlock.ProbeDeadlines(l))
			settleGoroutines(t, base)
		})
	}
}

// TestHundredThousandCancelledWaits gives up 100,000 waits on a held key, in batches of 1,000
// concurrent waiters: 90 batches by cancelling their ctx, 10 by letting their Timeout pass. Each
// returns its ctx error or ErrTimeout, and afterwards nothing is left: the goroutine count is at
// its baseline, the table is empty, no deadline is scheduled and no timer is armed.
func TestHundredThousandCancelledWaits(t *testing.T) {
	const batches, batch = 100, 1000
	base := runtime.NumGoroutine()
	db := openDB(t)
	clk, l := manual(t, db)
	key := []byte("contended")
	h, err := l.TryLock(key, recordlock.Options{Scope: recordlock.ScopeNode, Lease: recordlock.MaxLease})
	require.NoError(t, err)
	// Waits shorter than the lease, so each batch's first waiter re-arms the shard's timer.
	wait := recordlock.Options{Scope: recordlock.ScopeNode, Timeout: time.Second}

	cancelled, timedOut := 0, 0
	for b := range batches {
		ctx, cancel := context.WithCancel(context.Background())
		errs := make(chan error, batch)
		for range batch {
			go func() {
				_, err := l.Lock(ctx, key, wait)
				errs <- err
			}()
		}
		waitUntil(t, "the batch queued", func() bool { return recordlock.ProbeQueuedWaiters(l, key) == batch })
		byTimeout := b%10 == 9
		if byTimeout {
			clk.Advance(wait.Timeout)
		} else {
			cancel()
		}
		for range batch {
			err := <-errs
			if byTimeout {
				require.ErrorIs(t, err, recordlock.ErrTimeout)
				timedOut++
			} else {
				require.ErrorIs(t, err, context.Canceled)
				cancelled++
			}
		}
		cancel()
	}
	require.Equal(t, batches*batch, cancelled+timedOut)
	assert.Zero(t, recordlock.ProbeQueuedWaiters(l, key))
	assert.Equal(t, 1, recordlock.ProbeDeadlines(l), "only the holder's lease is scheduled")
	require.True(t, h.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l), "the table is empty")
	assert.Zero(t, recordlock.ProbeDeadlines(l), "no deadline is scheduled")
	// A shard keeps its one timer armed after its keys go idle (that spares every uncontended Lock
	// a timer of its own); it fires once, finds nothing due and is not re-armed.
	assert.LessOrEqual(t, recordlock.ProbeTimers(clk), 1, "no timer per waiter")
	clk.Advance(recordlock.MaxLease)
	assert.Zero(t, recordlock.ProbeTimers(clk), "a timer was re-armed on an idle table")
	settleGoroutines(t, base)
	t.Logf("%d waits cancelled, %d timed out", cancelled, timedOut)
}

// TestReleaseHookCallingBackIntoLocker fires a release hook that calls back into the Locker (the
// same key, another key, its own handle, a timestamp) from every place a hook fires: Release,
// RevokeLease, the lease timer, the end of a Fence whose lease lapsed inside it, and Close. None
// may deadlock, and the hook's own TryLock of the key finds it already given back.
func TestReleaseHookCallingBackIntoLocker(t *testing.T) {
	triggers := []struct {
		name string
		fire func(clk *recordlock.ManualClock, l *recordlock.Locker, h *recordlock.Handle)
	}{
		{"Release", func(_ *recordlock.ManualClock, _ *recordlock.Locker, h *recordlock.Handle) { h.Release() }},
		{"RevokeLease", func(_ *recordlock.ManualClock, _ *recordlock.Locker, h *recordlock.Handle) { h.RevokeLease() }},
		{"lease timer", func(clk *recordlock.ManualClock, _ *recordlock.Locker, _ *recordlock.Handle) {
			clk.Advance(time.Minute)
		}},
		{"end of Fence", func(clk *recordlock.ManualClock, _ *recordlock.Locker, h *recordlock.Handle) {
			_ = h.Fence(func() error { clk.Advance(time.Minute); return nil })
		}},
		{"Close", func(_ *recordlock.ManualClock, l *recordlock.Locker, _ *recordlock.Handle) { _ = l.Close() }},
	}
	for _, tr := range triggers {
		t.Run(tr.name, func(t *testing.T) {
			db := openDB(t)
			clk, l := manual(t, db)
			other := newLocker(t, db, recordlock.WithClock(clk))
			key, otherKey := []byte("hooked"), []byte("elsewhere")
			h, err := l.TryLock(key, node)
			require.NoError(t, err)
			var calls atomic.Int32
			var reentered error
			hook := func() error {
				calls.Add(1)
				h2, err := other.TryLock(key, node) // the key was given back before the hook runs
				if err != nil {
					reentered = fmt.Errorf("TryLock of the hook's own key: %w", err)
					return err
				}
				h2.Release()
				h3, err := other.Lock(context.Background(), otherKey, node)
				if err != nil {
					reentered = fmt.Errorf("Lock of another key: %w", err)
					return err
				}
				h3.Release()
				_ = h.IsExpired()
				_ = h.IsLeaseExpired()
				<-h.Done()
				h.Release()
				h.RevokeLease()
				_ = h.Fence(func() error { return nil })
				_ = h.UpgradeToHold(0)
				_ = l.Timestamp()
				_, _ = l.TryLock(otherKey, node)
				return nil
			}
			require.True(t, h.JoinClusterRound(l.Timestamp(), 30*time.Second, clk.Mono(), hook))

			done := make(chan struct{})
			go func() {
				defer close(done)
				tr.fire(clk, l, h)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s deadlocked in a hook that calls back into the Locker", tr.name)
			}
			assert.Equal(t, int32(1), calls.Load(), "the hook fired once")
			assert.NoError(t, reentered)
			assert.True(t, h.IsExpired())
			require.NoError(t, l.Close())
			require.NoError(t, other.Close())
			assert.True(t, recordlock.ProbeTableEmpty(other))
		})
	}
}

// TestBlockingReleaseHookStallsOnlyItsCaller blocks a release hook and checks that only the
// goroutine that fired it waits: the key was already given back, other keys of the same shard
// (same mutex, same timer) lock, release and expire, and later lease timers still run.
func TestBlockingReleaseHookStallsOnlyItsCaller(t *testing.T) {
	for _, via := range []string{"Release", "lease timer", "Close"} {
		t.Run(via, func(t *testing.T) {
			base := runtime.NumGoroutine()
			db := openDB(t)
			clk, l := manual(t, db)
			other := newLocker(t, db, recordlock.WithClock(clk))
			key := []byte("blocked")
			neighbour := sameShardKey(t, l, key)

			h, err := l.TryLock(key, recordlock.Options{Scope: recordlock.ScopeNode, Lease: recordlock.MinLease})
			require.NoError(t, err)
			entered, unblock := make(chan struct{}), make(chan struct{})
			require.True(t, h.JoinClusterRound(l.Timestamp(), recordlock.MinLease, clk.Mono(), func() error {
				close(entered)
				<-unblock
				return nil
			}))
			// A neighbour whose lease ends after h's, with a waiter from the other Locker.
			n, err := l.TryLock(neighbour, recordlock.Options{Scope: recordlock.ScopeNode, Lease: 300 * time.Millisecond})
			require.NoError(t, err)
			var nHook atomic.Int32
			require.True(t, n.JoinClusterRound(l.Timestamp(), 300*time.Millisecond, clk.Mono(), func() error { nHook.Add(1); return nil }))
			waiter := make(chan *recordlock.Handle, 1)
			go func() {
				h, err := other.Lock(context.Background(), neighbour, recordlock.Options{Scope: recordlock.ScopeNode, Timeout: recordlock.MaxTimeout})
				assert.NoError(t, err)
				waiter <- h
			}()
			waitUntil(t, "the neighbour's waiter queued", func() bool { return recordlock.ProbeQueuedWaiters(l, neighbour) == 1 })

			stalled := make(chan struct{})
			go func() {
				defer close(stalled)
				switch via {
				case "Release":
					assert.True(t, h.Release())
				case "lease timer":
					clk.Advance(recordlock.MinLease)
				case "Close":
					assert.NoError(t, l.Close())
				}
			}()
			<-entered

			// The key is free although its hook has not returned.
			k, err := other.TryLock(key, node)
			require.NoError(t, err, "the key was given back before the hook ran")
			assert.True(t, h.IsExpired())
			// The shard's mutex is free: lock and release a key that shares it.
			third := sameShardKey(t, l, key, neighbour)
			x, err := other.Lock(context.Background(), third, node)
			require.NoError(t, err)
			assert.True(t, x.Release())
			// Later lease timers still run: the neighbour expires and its waiter gets the key.
			if via != "Close" {
				clk.Advance(300 * time.Millisecond)
				assert.True(t, n.IsLeaseExpired())
				got := <-waiter
				assert.Equal(t, int32(1), nHook.Load())
				assert.True(t, got.Release())
			}
			select {
			case <-stalled:
				t.Fatal("the goroutine that fired the hook returned while the hook was blocked")
			default:
			}
			close(unblock)
			<-stalled
			assert.True(t, k.Release())
			if via == "Close" {
				got := <-waiter
				assert.True(t, got.Release())
			}
			require.NoError(t, l.Close())
			assert.True(t, recordlock.ProbeTableEmpty(other))
			require.NoError(t, other.Close())
			settleGoroutines(t, base)
		})
	}
}

// sameShardKey returns a key that shares a shard with key and differs from every avoid.
func sameShardKey(t *testing.T, l *recordlock.Locker, key []byte, avoid ...[]byte) []byte {
	t.Helper()
next:
	for i := range 1 << 20 {
		k := fmt.Appendf(nil, "shard-mate-%d", i)
		if !recordlock.ProbeSameShard(l, key, k) {
			continue
		}
		for _, a := range avoid {
			if string(a) == string(k) {
				continue next
			}
		}
		return k
	}
	t.Fatal("no key shares the shard")
	return nil
}

// TestMillionRandomOps runs 1,000,000 random operations from four goroutines over 64 keys and two
// Lockers on a shared ManualClock: TryLock, Lock with a short real deadline, Release,
// RevokeLease, Fence, the predicates, Advance and StepWall. Invariant: no two fenced commits of
// one key ever overlap. At the end, once every handle is released, the table is empty, no
// deadline is scheduled, no timer is armed and no goroutine is left.
func TestMillionRandomOps(t *testing.T) {
	const (
		workers = 4
		total   = 1_000_000
		keys    = 64
	)
	base := runtime.NumGoroutine()
	db := openDB(t)
	clk := recordlock.NewManualClock(epoch)
	lockers := [2]*recordlock.Locker{
		newLocker(t, db, recordlock.WithClock(clk), recordlock.WithLogger(quiet)),
		newLocker(t, db, recordlock.WithClock(clk), recordlock.WithLogger(quiet)),
	}
	keyBytes := make([][]byte, keys)
	for i := range keyBytes {
		keyBytes[i] = fmt.Appendf(nil, "rand-%02d", i)
	}
	var inFence [keys]atomic.Int32
	var overlaps, fenced, acquired atomic.Int64
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			type held struct {
				h *recordlock.Handle
				k int
			}
			var mine []held
			for range total / workers {
				l := lockers[r.IntN(2)]
				k := r.IntN(keys)
				opts := recordlock.Options{Scope: recordlock.ScopeNode, Lease: recordlock.MinLease, Timeout: recordlock.MinTimeout}
				switch p := r.IntN(100); {
				case p < 30 && len(mine) < 4:
					if h, err := l.TryLock(keyBytes[k], opts); err == nil {
						mine = append(mine, held{h, k})
						acquired.Add(1)
					} else if !errors.Is(err, recordlock.ErrLocked) {
						t.Errorf("TryLock: %v", err)
						return
					}
				case p < 31 && len(mine) < 4:
					ctx, cancel := context.WithTimeout(context.Background(), 50*time.Microsecond)
					h, err := l.Lock(ctx, keyBytes[k], opts)
					cancel()
					if err == nil {
						mine = append(mine, held{h, k})
						acquired.Add(1)
					} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, recordlock.ErrTimeout) {
						t.Errorf("Lock: %v", err)
						return
					}
				case p < 55 && len(mine) > 0:
					i := r.IntN(len(mine))
					mine[i].h.Release()
					mine = append(mine[:i], mine[i+1:]...)
				case p < 60 && len(mine) > 0:
					mine[r.IntN(len(mine))].h.RevokeLease()
				case p < 80 && len(mine) > 0:
					m := mine[r.IntN(len(mine))]
					_ = m.h.Fence(func() error {
						if !inFence[m.k].CompareAndSwap(0, 1) {
							overlaps.Add(1)
							return nil
						}
						fenced.Add(1)
						inFence[m.k].Store(0)
						return nil
					})
				case p < 90 && len(mine) > 0:
					m := mine[r.IntN(len(mine))]
					_ = m.h.IsExpired()
					_ = m.h.IsLeaseExpired()
				case p < 97:
					clk.Advance(time.Duration(r.IntN(2000)) * time.Microsecond)
				default:
					clk.StepWall(time.Duration(r.IntN(7200)-3600) * time.Second)
				}
			}
			for _, m := range mine {
				m.h.Release()
			}
		})
	}
	wg.Wait()
	assert.Zero(t, overlaps.Load(), "two fenced commits of one key overlapped")
	require.Positive(t, fenced.Load())
	t.Logf("%d operations: %d acquisitions, %d fenced commits, none overlapping", total, acquired.Load(), fenced.Load())
	assert.True(t, recordlock.ProbeTableEmpty(lockers[0]), "the table is empty")
	assert.Zero(t, recordlock.ProbeDeadlines(lockers[0]), "no deadline is scheduled")
	assert.LessOrEqual(t, recordlock.ProbeTimers(clk), keys, "at most one idle timer per shard in use")
	clk.Advance(recordlock.MaxLease)
	assert.Zero(t, recordlock.ProbeTimers(clk), "a timer was re-armed on an idle table")
	settleGoroutines(t, base)
}

// TestReleaseHookFiredByFenceMayCallFence is the regression test for what
// TestReleaseHookCallingBackIntoLocker caught: a release hook fired by Fence itself (the lease
// lapsed inside commit, or Fence found it lapsed) ran while Fence still held the handle's fence
// mutex, so a hook that called Fence on its handle deadlocked.
func TestReleaseHookFiredByFenceMayCallFence(t *testing.T) {
	for _, lazy := range []bool{false, true} {
		t.Run(fmt.Sprintf("found lazily=%v", lazy), func(t *testing.T) {
			db := openDB(t)
			clk := recordlock.NewManualClock(epoch)
			var c recordlock.Clock = clk
			if lazy {
				c = frozenTimers{clk}
			}
			l := newLocker(t, db, recordlock.WithClock(c))
			h, err := l.TryLock([]byte("k"), node)
			require.NoError(t, err)
			var inner error
			require.True(t, h.JoinClusterRound(l.Timestamp(), recordlock.MinLease, clk.Mono(), func() error {
				inner = h.Fence(func() error { return nil })
				return nil
			}))
			done := make(chan error, 1)
			go func() {
				if lazy {
					clk.Advance(time.Second) // no timer runs: Fence finds the lapse itself
					done <- h.Fence(func() error { return nil })
					return
				}
				done <- h.Fence(func() error { clk.Advance(time.Second); return nil })
			}()
			select {
			case err := <-done:
				if lazy {
					require.ErrorIs(t, err, recordlock.ErrLeaseExpired)
				} else {
					require.NoError(t, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a release hook fired by Fence deadlocked calling Fence")
			}
			require.ErrorIs(t, inner, recordlock.ErrLeaseExpired)
			assert.True(t, recordlock.ProbeTableEmpty(l))
		})
	}
}
