package recordlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

func TestManualClockReadings(t *testing.T) {
	clk := recordlock.NewManualClock(epoch)
	assert.True(t, clk.Now().Equal(epoch))
	assert.Zero(t, clk.Mono())

	clk.Advance(1500 * time.Millisecond)
	assert.True(t, clk.Now().Equal(epoch.Add(1500*time.Millisecond)))
	assert.Equal(t, 1500*time.Millisecond, clk.Mono())

	clk.StepWall(-time.Hour)
	assert.True(t, clk.Now().Equal(epoch.Add(1500*time.Millisecond-time.Hour)))
	assert.Equal(t, 1500*time.Millisecond, clk.Mono(), "StepWall leaves Mono alone")
	clk.StepWall(2 * time.Hour)
	assert.True(t, clk.Now().Equal(epoch.Add(1500*time.Millisecond+time.Hour)))
	assert.Equal(t, 1500*time.Millisecond, clk.Mono())
}

func TestManualClockRunsDueTimersInOrderBeforeAdvanceReturns(t *testing.T) {
	clk := recordlock.NewManualClock(epoch)
	var ran []int // no lock: the callbacks run in this goroutine, which -race would catch otherwise
	for _, d := range []int{3, 1, 2, 5} {
		clk.AfterFunc(time.Duration(d)*time.Second, func() { ran = append(ran, d) })
	}
	assert.Empty(t, ran, "AfterFunc never calls f before it returns")

	clk.StepWall(time.Hour)
	assert.Empty(t, ran, "StepWall runs nothing")
	clk.Advance(999 * time.Millisecond)
	assert.Empty(t, ran)
	clk.Advance(3 * time.Second)
	assert.Equal(t, []int{1, 2, 3}, ran)
	clk.Advance(time.Second)
	assert.Equal(t, []int{1, 2, 3}, ran)
	clk.Advance(time.Second)
	assert.Equal(t, []int{1, 2, 3, 5}, ran)
}

func TestManualClockZeroDelayFallsDueAtNextAdvance(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		clk := recordlock.NewManualClock(epoch)
		ran := 0
		clk.AfterFunc(d, func() { ran++ })
		assert.Zero(t, ran)
		clk.Advance(0)
		assert.Equal(t, 1, ran, "d=%v", d)
		clk.Advance(time.Second)
		assert.Equal(t, 1, ran, "a timer runs once")
	}

	// A timer armed by a callback falls due at the next Advance, not the running one.
	clk := recordlock.NewManualClock(epoch)
	var ran []string
	clk.AfterFunc(time.Second, func() {
		ran = append(ran, "outer")
		clk.AfterFunc(0, func() { ran = append(ran, "inner") })
	})
	clk.Advance(time.Second)
	assert.Equal(t, []string{"outer"}, ran)
	clk.Advance(0)
	assert.Equal(t, []string{"outer", "inner"}, ran)
}

func TestManualClockStop(t *testing.T) {
	clk := recordlock.NewManualClock(epoch)
	ran := 0
	stopped := clk.AfterFunc(time.Second, func() { ran++ })
	fired := clk.AfterFunc(time.Second, func() { ran += 10 })
	assert.True(t, stopped.Stop())
	assert.False(t, stopped.Stop(), "a second Stop finds nothing to stop")
	clk.Advance(time.Second)
	assert.Equal(t, 10, ran)
	assert.False(t, fired.Stop(), "a timer that ran cannot be stopped")
}

func TestManualClockNegativeAdvancePanics(t *testing.T) {
	clk := recordlock.NewManualClock(epoch)
	assert.PanicsWithValue(t, "recordlock: ManualClock.Advance with a negative duration", func() { clk.Advance(-1) })
	assert.Zero(t, clk.Mono())
}

func TestSystemClock(t *testing.T) {
	clk := recordlock.SystemClock()
	require.Same(t, clk, recordlock.SystemClock())
	before := time.Now()
	now := clk.Now()
	assert.False(t, now.Before(before))
	m1 := clk.Mono()
	m2 := clk.Mono()
	assert.GreaterOrEqual(t, m2, m1)

	// Real time is what is under test here.
	fired := make(chan time.Duration, 1)
	clk.AfterFunc(time.Millisecond, func() { fired <- clk.Mono() })
	assert.GreaterOrEqual(t, <-fired, m2+time.Millisecond)
	never := clk.AfterFunc(time.Hour, func() { t.Error("a stopped timer ran") })
	assert.True(t, never.Stop())
}

// TestSystemClockLockReadsTheWallClock: on the system clock a lock's AcquiredAt and ExpiresAt are
// wall readings taken between the calls around Lock, although Lock derives its wall reading from
// the monotonic clock and an offset it samples again every millisecond.
func TestSystemClockLockReadsTheWallClock(t *testing.T) {
	l := newLocker(t, openDB(t))
	lease := 10 * time.Second
	for i := range 50 {
		before := time.Now()
		h, err := l.TryLock(fmt.Appendf(nil, "k%d", i), recordlock.Options{Lease: lease, Scope: recordlock.ScopeNode})
		require.NoError(t, err)
		after := time.Now()
		at := h.AcquiredAt().Time()
		assert.False(t, at.Before(before.Add(-time.Microsecond)), "AcquiredAt %v is before the call at %v", at, before)
		assert.False(t, at.After(after.Add(time.Microsecond)), "AcquiredAt %v is after the call at %v", at, after)
		exp := h.ExpiresAt()
		assert.False(t, exp.Before(before.Add(lease-time.Microsecond)), "ExpiresAt %v < %v + lease", exp, before)
		assert.False(t, exp.After(after.Add(lease+time.Microsecond)), "ExpiresAt %v > %v + lease", exp, after)
		require.True(t, h.Release())
		if i%10 == 9 {
			time.Sleep(2 * time.Millisecond) // real time is under test: let the clock sample its offset again
		}
	}
}
