package recordlock

import (
	"time"

	"github.com/recordlock/recordlock/internal/locktable"
)

// Clock is the only source of time in this package: leases run on Mono, timestamps and ExpiresAt
// on Now, and every timer is armed with AfterFunc. Tests substitute a ManualClock.
//
//	type Clock interface {
//		// Now is the wall clock: ExpiresAt and Timestamps.
//		Now() time.Time
//		// Mono is a monotonic reading from a fixed origin; it never decreases.
//		Mono() time.Duration
//		// AfterFunc runs f in its own goroutine once Mono has advanced by d. It never calls f
//		// before it returns, so callers may hold locks while arming a timer.
//		AfterFunc(d time.Duration, f func()) Timer
//	}
//
// It is the key-lock table's own Clock, so that a Locker hands its clock to the table as it is.
type Clock = locktable.Clock

// Timer is a pending AfterFunc.
//
//	type Timer interface {
//		// Stop prevents the call if it has not started; it reports whether it did.
//		Stop() bool
//	}
type Timer = locktable.Timer

// SystemClock returns the real clock: time.Now, the runtime's monotonic clock and time.AfterFunc.
func SystemClock() Clock { return locktable.System }

// monoAfter is the Mono reading d after mono, saturated at the ends of time.Duration
// (locktable.MonoAfter): every deadline on a Locker's clock (a lease end, a wait's timeout,
// LockAll's budget, a round) is such a sum, and its d may be as long as a ctx deadline is far.
func monoAfter(mono, d time.Duration) time.Duration { return locktable.MonoAfter(mono, d) }

// ManualClock is a Clock that moves only when told to, for deterministic tests of code that uses
// recordlock. It is safe for concurrent use. Its methods:
//
//   - Now() time.Time returns the wall reading.
//   - Mono() time.Duration returns the monotonic reading.
//   - AfterFunc(d time.Duration, f func()) Timer arms a timer that runs f inside the Advance that
//     moves Mono past d. A timer armed with d <= 0 falls due at the next Advance, Advance(0)
//     included.
//   - Advance(d time.Duration) moves both readings forward by d and then runs, in deadline order
//     and in the calling goroutine, every timer armed before this call that has fallen due. It
//     panics if d is negative.
//   - StepWall(d time.Duration) moves the wall reading by d (either sign), as an NTP step or an
//     operator would. The monotonic reading does not move and no timer runs.
type ManualClock = locktable.ManualClock

// NewManualClock returns a ManualClock whose wall reading is start and whose monotonic reading
// is zero.
func NewManualClock(start time.Time) *ManualClock { return locktable.NewManualClock(start) }
