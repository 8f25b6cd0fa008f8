package locktable

import (
	"sync"
	"time"
)

// ManualClock is a Clock that moves only when told to, for deterministic tests. It is safe for
// concurrent use. The API exports it under its own name (recordlock.ManualClock).
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

// nowMono gives both readings under one lock (wallAndMono). It is unexported so that the API's
// ManualClock has no method beyond those it documents.
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
	t := &manualTimer{c: c, due: MonoAfter(c.mono, max(d, 0)), seq: c.seq, f: f}
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

// PendingTimers counts the timers of c that are armed and have not run, for tests that check
// nothing was left scheduled. It is a function, not a method, to keep it out of the API's
// ManualClock.
func PendingTimers(c *ManualClock) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}
