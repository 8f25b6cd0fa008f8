package locktable

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/testutil"
)

// A lease that lapses with its key held writes one debug record, naming the key and counting the
// requests queued for it, when the tenant logs at debug level; a range's, which has no key entry,
// counts none.
func TestLapseWritesADebugRecord(t *testing.T) {
	clk := NewManualClock(time.Unix(1e9, 0))
	out := &testutil.LogBuffer{}
	l := openTestLocker(newTestTable(t), clk, slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { l.Close() })

	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Second})
	require.NoError(t, err)
	got := lockAsync(t.Context(), l, []byte("k"), testOptions{})
	WaitQueued(t, l, []byte("k"), 1)
	clk.Advance(2 * time.Second) // the timer settles the lapse
	require.True(t, granted(t, got, "the waiter, once the lease lapsed").Release())
	assert.Contains(t, out.String(), `msg="recordlock: lease lapsed with its key held"`)
	assert.Contains(t, out.String(), "key=k cf=0", "the record names the key")
	assert.Contains(t, out.String(), "waiters=1", "the record counts the request queued for the key")
	assert.True(t, h.Now().Expired())

	assert.Equal(t, 1, strings.Count(out.String(), "lease lapsed with its key held"))
	assert.True(t, ProbeTableEmpty(l))

	// A table of its own, closed here: a panic under its shard mutex would leave that mutex locked,
	// and a cleanup's Close would wait for it.
	rl := openTestLocker(New("test", &Stamps{}), clk, slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug})))
	r, err := rl.TryLockRange("a", "b", testOptions{Lease: time.Second})
	require.NoError(t, err)
	clk.Advance(2 * time.Second)
	assert.True(t, r.Now().Expired())
	assert.Contains(t, out.String(), "key=a cf=0 holder_age=2s waiters=0", "a range's lapse is recorded, with no waiters")
	require.NoError(t, rl.Close())
	assert.True(t, ProbeTableEmpty(rl))
}
