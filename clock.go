package recordlock

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Clock is the only source of time in this package: leases run on Mono, timestamps and ExpiresAt
// on Now, and every timer is armed with AfterFunc. Tests substitute a ManualClock.
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
// saves a read on every Lock.
type wallAndMono interface {
	nowMono() (int64, time.Duration)
}

// readClock returns c's wall reading in Unix nanoseconds (the form handles store) and its
// monotonic reading, from one clock read where c allows it. The system clock is tested for first
// because it is the hot path's clock.
func readClock(c Clock) (int64, time.Duration) {
	if s, ok := c.(*systemClock); ok {
		return s.nowMono()
	}
	if wm, ok := c.(wallAndMono); ok {
		return wm.nowMono()
	}
	return c.Now().UnixNano(), c.Mono()
}

type systemClock struct {
	origin time.Time
	// wallOffset is the wall clock minus Mono, in Unix nanoseconds, as sampled at Mono syncedAt.
	// The kernel slews both clocks alike, so the offset changes only when the wall clock is
	// stepped; nowMono samples it again every wallResync.
	wallOffset atomic.Int64
	syncedAt   atomic.Int64
}

// wallResync bounds how long a step of the wall clock can go unseen by nowMono.
const wallResync = time.Millisecond

var theSystemClock = newSystemClock()

func newSystemClock() *systemClock {
	c := &systemClock{origin: time.Now()}
	c.wallOffset.Store(c.origin.UnixNano())
	return c
}

// SystemClock returns the real clock: time.Now, the runtime's monotonic clock and time.AfterFunc.
func SystemClock() Clock { return theSystemClock }

func (c *systemClock) Now() time.Time      { return time.Now() }
func (c *systemClock) Mono() time.Duration { return time.Since(c.origin) }

// nowMono reads only the monotonic clock and derives the wall reading from the sampled offset:
// reading the wall clock as well costs as much again on every Lock. The result equals
// time.Now's wall reading except within wallResync after a wall-clock step, which it then
// reflects up to that much later (Timestamps stay strictly increasing regardless; leases never
// depend on the wall clock).
func (c *systemClock) nowMono() (int64, time.Duration) {
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

func (c *systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// monoAfter is the Mono reading d after mono, saturated at the ends of time.Duration. Every
// deadline on a Locker's clock (a lease end, a wait's timeout, LockAll's budget, a round) is such
// a sum, and its d may be as long as a ctx deadline is far: a year-9999 deadline, or
// context.WithTimeout(ctx, math.MaxInt64), means "never", not a sum wrapped into the past, which
// would top its shard's deadline heap, arm the timer centuries ahead and so stop every other
// lease end and timeout of the shard (docs/DESIGN.md §7).
// The sum is taken first and tested for wrapping (its sign differs from both operands' only
// then), which costs the uncontended Lock, whose lease end is such a sum, an add and one branch.
func monoAfter(mono, d time.Duration) time.Duration {
	s := mono + d
	if (mono^s)&(d^s) < 0 {
		if d > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

// untilDeadline returns the time left until d, a ctx deadline. A ctx deadline is a reading of
// the real clock whatever clock the Locker runs on, so it is measured here, with time.Until.
func untilDeadline(d time.Time) time.Duration { return time.Until(d) }

// ManualClock is a Clock that moves only when told to, for deterministic tests of code that uses
// recordlock. It is safe for concurrent use.
type ManualClock struct {
	mu     sync.Mutex
	wall   time.Time
	mono   time.Duration
	seq    uint64
	timers []*manualTimer
}

type manualTimer struct {
	c   *ManualClock
	due time.Duration
	seq uint64
	f   func()
}

// NewManualClock returns a ManualClock whose wall reading is start and whose monotonic reading
// is zero.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{wall: start} }

// Now returns the wall reading.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

// Mono returns the monotonic reading.
func (c *ManualClock) Mono() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

func (c *ManualClock) nowMono() (int64, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall.UnixNano(), c.mono
}

// AfterFunc arms a timer that runs f inside the Advance that moves Mono past d. A timer armed
// with d <= 0 falls due at the next Advance, Advance(0) included.
func (c *ManualClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &manualTimer{c: c, due: monoAfter(c.mono, max(d, 0)), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

// Stop removes the timer if it has not run yet.
func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return t.c.remove(t)
}

func (c *ManualClock) remove(t *manualTimer) bool {
	for i, x := range c.timers {
		if x == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Advance moves both readings forward by d and then runs, in deadline order and in the calling
// goroutine, every timer armed before this call that has fallen due. It panics if d is negative.
func (c *ManualClock) Advance(d time.Duration) {
	if d < 0 {
		panic("recordlock: ManualClock.Advance with a negative duration")
	}
	c.mu.Lock()
	c.mono += d
	c.wall = c.wall.Add(d)
	armedBefore := c.seq
	c.mu.Unlock()
	for {
		t := c.nextDue(armedBefore)
		if t == nil {
			return
		}
		t.f()
	}
}

// nextDue removes and returns the earliest due timer armed no later than seq, or nil.
func (c *ManualClock) nextDue(seq uint64) *manualTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next *manualTimer
	for _, t := range c.timers {
		if t.seq <= seq && t.due <= c.mono && (next == nil || t.due < next.due) {
			next = t
		}
	}
	if next != nil {
		c.remove(next)
	}
	return next
}

// StepWall moves the wall reading by d (either sign), as an NTP step or an operator would. The
// monotonic reading does not move and no timer runs.
func (c *ManualClock) StepWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
}
