package recordlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

func TestReleaseHookFailuresAreContainedAndRateLimited(t *testing.T) {
	db := openDB(t)
	logs := &recordlock.LogCapture{}
	clk, l := manual(t, db, recordlock.WithLogger(slog.New(logs)))
	panicky := func() error { panic("hook exploded") }
	failing := func() error { return errors.New("hook failed") }
	n := 0
	lock := func(hook func() error, lease time.Duration) *recordlock.Handle {
		n++
		h, err := l.TryLock([]byte{byte(n)}, recordlock.Options{Lease: lease})
		require.NoError(t, err)
		joinHook(t, h, clk, lease, hook)
		return h
	}

	// At 0 s: the first failure of each kind is logged; Release still reports success.
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("a release hook's panic reached the caller of Release: %v", p)
			}
		}()
		assert.True(t, lock(panicky, time.Minute).Release())
	}()
	assert.True(t, lock(failing, time.Minute).Release())
	h := lock(panicky, time.Minute)
	h.RevokeLease()
	assert.Equal(t, []string{"panic", "error"}, logs.Kinds(), "the first failure of each kind is logged")
	recs := logs.Records()
	assert.Equal(t, "WARN", recs[0].Level)
	assert.Contains(t, recs[0].Attrs["err"], "hook exploded")
	assert.Contains(t, recs[1].Attrs["err"], "hook failed")

	// Within 60 s further failures are not logged, from any path.
	stalled := lock(panicky, 60*time.Second) // its lease timer runs the hook at 60 s
	clk.Advance(59 * time.Second)
	assert.True(t, lock(failing, time.Minute).Release())
	assert.True(t, lock(panicky, time.Minute).Release())
	assert.Equal(t, []string{"panic", "error"}, logs.Kinds(), "one line per kind of failure per 60 s")

	// At 60 s, a persisting fault is reported again: the lease timer's hook panics inside Advance
	// (the timer's goroutine) without escaping.
	clk.Advance(time.Second)
	assert.True(t, stalled.IsLeaseExpired())
	assert.Equal(t, []string{"panic", "error", "panic"}, logs.Kinds(), "not latched: a fault that persists is reported again after 60 s")
	assert.True(t, lock(failing, time.Minute).Release())
	assert.Equal(t, []string{"panic", "error", "panic", "error"}, logs.Kinds(), "not latched: a fault that persists is reported again after 60 s")

	// The limit is per Locker.
	other := newLocker(t, db, recordlock.WithClock(clk), recordlock.WithLogger(slog.New(logs)))
	h2, err := other.TryLock([]byte("other"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	joinHook(t, h2, clk, time.Minute, failing)
	assert.True(t, h2.Release())
	assert.Equal(t, []string{"panic", "error", "panic", "error", "error"}, logs.Kinds(), "the limit is per Locker")
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
			_, clk, l, other := lockerPair(t)
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
			testutil.Await(t, done, tr.name+" with a hook that calls back into the Locker")
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
			_, clk, l, other := lockerPair(t)
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
			testutil.WaitUntil(t, "the neighbour's waiter queued", func() bool { return recordlock.ProbeQueuedWaiters(l, neighbour) == 1 })

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
			testutil.SettleGoroutines(t, base)
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
