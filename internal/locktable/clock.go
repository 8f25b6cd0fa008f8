package locktable

import (
	"math"
	"sync/atomic"
	"time"
)

// Clock is the table's source of time, and the API's (recordlock.Clock): leases and waits run on
// Mono, timestamps, AcquiredAt and ExpiresAt on Now, and every timer is armed with AfterFunc.
type Clock interface {
	// Now is the wall clock: ExpiresAt and Timestamps.
	Now() time.Time
	// Mono is a monotonic reading from a fixed origin; it never decreases.
	Mono() time.Duration
	// AfterFunc runs f in its own goroutine once Mono has advanced by d. It never calls f before
	// it returns, so callers may hold locks while arming a timer.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it did.
	Stop() bool
}

// wallAndMono is implemented by clocks that can give both readings from one clock read, which
// saves a read on every lock (ManualClock, and clocks that embed one).
type wallAndMono interface {
	nowMono() (int64, time.Duration)
}

// ReadClock returns c's wall reading in Unix nanoseconds and its monotonic reading, from one
// clock read where c allows it. The system clock is tested for first because it is the hot
// path's clock.
func ReadClock(c Clock) (int64, time.Duration) {
	if s, ok := c.(*SystemClock); ok {
		return s.NowMono()
	}
	if wm, ok := c.(wallAndMono); ok {
		return wm.nowMono()
	}
	return c.Now().UnixNano(), c.Mono()
}

// SystemClock is the real clock: time.Now, the runtime's monotonic clock and time.AfterFunc.
// System is the one instance.
type SystemClock struct {
	origin time.Time
	// wallOffset is the wall clock minus Mono, in Unix nanoseconds, as sampled at Mono syncedAt.
	// The kernel slews both clocks alike, so the offset changes only when the wall clock is
	// stepped; NowMono samples it again every wallResync.
	wallOffset atomic.Int64
	syncedAt   atomic.Int64
}

// wallResync bounds how long a step of the wall clock can go unseen by NowMono.
const wallResync = time.Millisecond

// System is the real clock.
var System = newSystemClock()

func newSystemClock() *SystemClock {
	c := &SystemClock{origin: time.Now()}
	c.wallOffset.Store(c.origin.UnixNano())
	return c
}

func (c *SystemClock) Now() time.Time      { return time.Now() }
func (c *SystemClock) Mono() time.Duration { return time.Since(c.origin) }

// NowMono reads only the monotonic clock and derives the wall reading from the sampled offset:
// reading the wall clock as well costs as much again on every lock. The result equals time.Now's
// wall reading except within wallResync after a wall-clock step, which it then reflects up to that
// much later (timestamps stay strictly increasing regardless; leases never depend on the wall
// clock).
func (c *SystemClock) NowMono() (int64, time.Duration) {
	mono := time.Since(c.origin)
	if mono-time.Duration(c.syncedAt.Load()) < wallResync {
		return c.wallOffset.Load() + int64(mono), mono
	}
	now := time.Now()
	mono = now.Sub(c.origin)
	wall := now.UnixNano()
	c.wallOffset.Store(wall - int64(mono))
	c.syncedAt.Store(int64(mono))
	return wall, mono
}

func (c *SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// MonoAfter is the Mono reading d after mono, saturated at the ends of time.Duration. Every
// deadline on a tenant's clock (a lease end, a wait's timeout) is such a sum, and its d may be as
// long as a ctx deadline is far: a year-9999 deadline, or context.WithTimeout(ctx,
// math.MaxInt64), means "never", not a sum wrapped into the past, which would top its shard's
// deadline heap, arm the timer centuries ahead and so stop every other lease end and timeout of
// the shard (docs/DESIGN.md §7). The sum is taken first and tested for wrapping (its sign differs
// from both operands' only then), which costs the uncontended lock, whose lease end is such a sum,
// an add and one branch.
func MonoAfter(mono, d time.Duration) time.Duration {
	s := mono + d
	if (mono^s)&(d^s) < 0 {
		if d > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}
