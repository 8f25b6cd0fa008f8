package recordlock

import (
	"sync"
	"time"

	"github.com/recordlock/recordlock/internal/locktable"
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
// monotonic reading, from one clock read where c allows it.
func readClock(c Clock) (int64, time.Duration) {
	if _, ok := c.(*systemClock); ok {
		return locktable.System.NowMono()
	}
	if wm, ok := c.(wallAndMono); ok {
		return wm.nowMono()
	}
	return c.Now().UnixNano(), c.Mono()
}

// systemClock is the real clock, the table's own (locktable.System), under the API's Clock.
type systemClock struct{}

var theSystemClock = &systemClock{}

// SystemClock returns the real clock: time.Now, the runtime's monotonic clock and time.AfterFunc.
func SystemClock() Clock { return theSystemClock }

func (c *systemClock) Now() time.Time                            { return locktable.System.Now() }
func (c *systemClock) Mono() time.Duration                       { return locktable.System.Mono() }
func (c *systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// monoAfter is the Mono reading d after mono, saturated at the ends of time.Duration
// (locktable.MonoAfter): every deadline on a Locker's clock (a lease end, a wait's timeout,
// LockAll's budget, a round) is such a sum, and its d may be as long as a ctx deadline is far.
func monoAfter(mono, d time.Duration) time.Duration { return locktable.MonoAfter(mono, d) }

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
