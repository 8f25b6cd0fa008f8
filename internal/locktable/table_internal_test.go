package locktable

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/invariants"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logCount is a slog handler that counts the records at Info and above.
type logCount struct {
	mu sync.Mutex
	n  int
}

func (c *logCount) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelInfo }
func (c *logCount) Handle(context.Context, slog.Record) error {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return nil
}
func (c *logCount) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *logCount) WithGroup(string) slog.Handler      { return c }

// A lease timer that finds the table inconsistent logs it once per database and never panics.
func TestKeyTableFaultLoggedOnce(t *testing.T) {
	if invariants.Enabled {
		t.Skip("the checker of a build with the tag invariants panics at the first change to the table this test corrupts: it runs without the tag")
	}
	tab := New("test", &Stamps{}) // left inconsistent: not checked at the end
	clk := NewManualClock(time.Unix(1, 0))
	var logs logCount
	l := openTestLocker(tab, clk, slog.New(&logs))
	defer l.Close()
	for _, key := range []string{"a", "b"} {
		h, err := l.TryLock([]byte(key), testOptions{Lease: time.Second})
		require.NoError(t, err)
		h.Done() // watched: the lease timer will find the fault
		sh := h.shard()
		sh.mu.Lock()
		h.e.holder = nil // the table lost track of the holder
		sh.mu.Unlock()
	}
	require.NotPanics(t, func() { clk.Advance(time.Second) })
	logs.mu.Lock()
	defer logs.mu.Unlock()
	assert.Equal(t, 1, logs.n)
}
