// Package testutil holds the helpers the module's tests share: receiving from a goroutine the test
// started, within a guard, and waiting until a condition the test cannot be told of holds. The
// guards only turn a hang into a failure; no outcome rests on them.
package testutil

import (
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
