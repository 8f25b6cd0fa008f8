package httpdebug_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/httpdebug"
)

// The page and the JSON say when they were taken, on the clock of the first database's Locker by
// name, and how long each holder has held its lock by then: exactly, in nanoseconds, in the
// JSON; on the page to the millisecond, and from a minute on to the second. A cluster round's TsR
// ahead of this clock is held for 0, not for a negative time.
func TestTakenAtAndHeldFor(t *testing.T) {
	db, _ := openDB(t)
	clk, l := manual(t, db)
	old, err := l.TryLock([]byte("old"), recordlock.Options{Lease: 5 * time.Minute})
	require.NoError(t, err)
	require.Equal(t, epoch, old.AcquiredAt().Time().UTC(), "the first timestamp is the wall reading")
	clk.Advance(3*time.Minute + 3*time.Second)
	recent, err := l.TryLock([]byte("recent"), recordlock.Options{Lease: 5 * time.Minute})
	require.NoError(t, err)
	require.Equal(t, epoch.Add(3*time.Minute+3*time.Second), recent.AcquiredAt().Time().UTC())
	ahead, err := l.TryLock([]byte("ahead"), recordlock.Options{Lease: 5 * time.Minute})
	require.NoError(t, err)
	tsR := recordlock.Timestamp(clk.Now().Add(time.Hour).UnixNano())
	require.True(t, ahead.JoinClusterRound(tsR, time.Minute, clk.Mono(), func() error { return nil }))
	clk.Advance(1200 * time.Millisecond)
	other, _ := openDB(t)
	_, behind := manual(t, other) // a clock still at epoch, which the page is not taken on
	h := httpdebug.Handler(map[string]*recordlock.Locker{"orders": l, "zeta": behind})

	doc := getJSON(t, h, "/?format=json")
	assert.Equal(t, "2026-01-02T03:07:09.2Z", doc.TakenAt, "3m4.2s after epoch")
	require.Len(t, doc.Databases, 2)
	held := map[string]int64{}
	for _, lock := range doc.Databases[0].Locks {
		held[lock.Key] = lock.HeldFor
	}
	assert.Equal(t, map[string]int64{
		"old":    int64(3*time.Minute + 4200*time.Millisecond),
		"recent": int64(1200 * time.Millisecond),
		"ahead":  0,
	}, held)

	_, _, page := get(t, h, http.MethodGet, "/")
	assert.Contains(t, page, `Taken at <time datetime="2026-01-02T03:07:09.200Z">2026-01-02T03:07:09.200Z</time>.`)
	locks := section(t, page, `<table class="locks">`, "</table>")
	assert.Contains(t, locks, "<th>hold</th><th>held for</th><th>lease left</th>")
	assert.Contains(t, locks, `<td class="key">old</td><td>default (0)</td><td>exclusive</td><td class="owner">—</td><td>no</td><td class="num">3m4s</td>`)
	assert.Contains(t, locks, `<td class="key">recent</td><td>default (0)</td><td>exclusive</td><td class="owner">—</td><td>no</td><td class="num">1.2s</td>`)
	assert.Contains(t, locks, `<td class="key">ahead</td><td>default (0)</td><td>exclusive, cluster</td><td class="owner">—</td><td>no</td><td class="num">0s</td>`)
}
