// Package testutil holds the helpers the module's tests share: receiving from a goroutine the test
// started, within a guard, running a call in a goroutine that the test's end waits for, and
// waiting until a condition the test cannot be told of holds. The guards only turn a hang into a
// failure; no outcome rests on them.
package testutil

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// Guard is how long Await waits for a result before it fails the test: long enough that only a
// hang reaches it, even under -race on a loaded host.
const Guard = 10 * time.Second

// Await receives from ch, failing the test if nothing arrives within Guard.
func Await[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(Guard):
		t.Fatalf("%s did not happen within %v", what, Guard)
		panic("unreachable")
	}
}

// Go runs call in a goroutine with a ctx derived from ctx, for a call on what is used by one
// goroutine (a Txn). When the test ends, a cleanup cancels that ctx and waits for call to return,
// failing the test if it does not within Guard: what the test registered with Cleanup before Go
// (the Txn's Rollback) then comes after call. A defer does not: defers run before cleanups.
func Go(t testing.TB, ctx context.Context, call func(ctx context.Context)) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		call(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(Guard):
			t.Errorf("a call the test started did not return within %v of the test's end", Guard)
		}
	})
}

// NotReturned reports whether nothing has arrived on c within a short grace period: long enough
// for a goroutine that is free to finish to do so, and a check of blocking, not of speed.
func NotReturned[T any](c <-chan T) bool {
	select {
	case <-c:
		return false
	case <-time.After(50 * time.Millisecond):
		return true
	}
}

// WaitUntil blocks until cond holds. It synchronizes with goroutines the test started (a Lock
// that has queued, a goroutine that has exited); the bound only turns a hang into a failure.
func WaitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; !cond(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		if i < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// SettleGoroutines waits until no more goroutines run than base, the count before the test
// started its own: every goroutine it started has ended.
func SettleGoroutines(t testing.TB, base int) {
	t.Helper()
	WaitUntil(t, fmt.Sprintf("the goroutine count is back to %d", base),
		func() bool { return runtime.NumGoroutine() <= base })
}

// Closed reports whether c is closed, without blocking.
func Closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
