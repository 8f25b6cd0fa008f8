package recordlock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

func TestTimestampStrictlyIncreasing(t *testing.T) {
	db := openDB(t)
	clk, a := manual(t, db)
	b := newLocker(t, db, recordlock.WithClock(clk))
	first := a.Timestamp()
	require.GreaterOrEqual(t, int64(first), epoch.UnixNano(), "wall-anchored")

	const goroutines, each = 8, 2000
	var wg sync.WaitGroup
	seen := make([][]recordlock.Timestamp, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			l := a
			if g%2 == 1 {
				l = b
			}
			for i := range each {
				switch {
				case g == 0 && i == each/2:
					clk.StepWall(-time.Hour)
				case g < 4 && i%10 == 0:
					clk.StepWall(time.Microsecond) // let the wall reading lead now and then
				}
				seen[g] = append(seen[g], l.Timestamp())
			}
		})
	}
	wg.Wait()

	all := map[recordlock.Timestamp]bool{first: true}
	for g, ts := range seen {
		for i, v := range ts {
			if i > 0 {
				require.Greater(t, v, ts[i-1], "goroutine %d, timestamp %d", g, i)
			}
			require.Greater(t, v, first)
			require.False(t, all[v], "timestamp %d minted twice", v)
			all[v] = true
		}
	}
	last := a.Timestamp()
	for v := range all {
		require.Less(t, v, last)
	}
	// A wall clock that stepped back an hour is still behind the last stamp: last+1.
	assert.Equal(t, last+1, b.Timestamp())
}

// Closing the last Locker of a database drops its table; the next Locker must still mint
// timestamps above every earlier one, even when the wall clock stepped back in between.
func TestTimestampsIncreaseAcrossTableLifetimes(t *testing.T) {
	db := openDB(t)
	clk := recordlock.NewManualClock(epoch)
	first, err := recordlock.New(db, recordlock.WithClock(clk))
	require.NoError(t, err)
	before := first.Timestamp()
	require.NoError(t, first.Close())
	clk.StepWall(-time.Hour)
	second := newLocker(t, db, recordlock.WithClock(clk))
	assert.Greater(t, second.Timestamp(), before)
}
