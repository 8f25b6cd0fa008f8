package recordlock_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// A lease that lapses with its key held is logged at debug level with its key, holder age and
// waiters; with debug off nothing is logged.
func TestDebugRecordOfLapse(t *testing.T) {
	for _, debug := range []bool{true, false} {
		t.Run(fmt.Sprintf("debug=%v", debug), func(t *testing.T) {
			db := openDB(t)
			level := slog.LevelInfo
			if debug {
				level = slog.LevelDebug
			}
			var buf bytes.Buffer
			var mu sync.Mutex
			logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: level}))
			clk, l := manual(t, db, recordlock.WithLogger(logger))
			_, err := l.TryLock([]byte("stalled-key"), recordlock.Options{Lease: 100 * time.Millisecond})
			require.NoError(t, err)
			waiter := lockAsync(context.Background(), l, []byte("stalled-key"), recordlock.Options{})
			waitQueued(t, l, []byte("stalled-key"), 1)
			clk.Advance(100 * time.Millisecond)
			h := granted(t, waiter, "Lock")
			require.NotNil(t, h)
			require.True(t, h.Release())
			mu.Lock()
			out := buf.String()
			mu.Unlock()
			if !debug {
				assert.Empty(t, out)
				return
			}
			assert.Contains(t, out, "lease lapsed with its key held")
			assert.Contains(t, out, "key=stalled-key")
			assert.Contains(t, out, "holder_age=100ms")
			assert.Contains(t, out, "waiters=1")
		})
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
