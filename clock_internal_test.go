package recordlock

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// monoAfter saturates at both ends of time.Duration and is a plain sum everywhere else.
func TestMonoAfterSaturates(t *testing.T) {
	for _, c := range []struct{ mono, d, want time.Duration }{
		{time.Second, time.Minute, time.Second + time.Minute},
		{time.Second, -time.Second, 0},
		{time.Second, 0, time.Second},
		{time.Second, math.MaxInt64, math.MaxInt64},
		{math.MaxInt64 - time.Second, time.Second, math.MaxInt64},
		{math.MaxInt64 - time.Second, time.Second + 1, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{-time.Second, math.MinInt64, math.MinInt64},
		{math.MinInt64 + time.Second, -time.Second - 1, math.MinInt64},
		{-time.Second, math.MaxInt64, math.MaxInt64 - time.Second},
	} {
		assert.Equal(t, c.want, monoAfter(c.mono, c.d), "monoAfter(%d, %d)", c.mono, c.d)
	}
}

// A ManualClock timer armed centuries ahead does not fall due at the next Advance.
func TestManualClockFarTimerStaysPending(t *testing.T) {
	clk := NewManualClock(time.Unix(1_700_000_000, 0))
	clk.Advance(time.Second)
	ran := false
	tm := clk.AfterFunc(math.MaxInt64, func() { ran = true })
	clk.Advance(time.Hour)
	assert.False(t, ran)
	assert.True(t, tm.Stop())
}
