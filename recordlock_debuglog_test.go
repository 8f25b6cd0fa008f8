package recordlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/internal/testutil"
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
			var buf testutil.LogBuffer
			logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))
			clk, l := manual(t, db, recordlock.WithLogger(logger))
			_, err := l.TryLock([]byte("stalled-key"), recordlock.Options{Lease: 100 * time.Millisecond})
			require.NoError(t, err)
			waiter := lockAsync(context.Background(), l, []byte("stalled-key"), recordlock.Options{})
			waitQueued(t, l, []byte("stalled-key"), 1)
			clk.Advance(100 * time.Millisecond)
			h := granted(t, waiter, "Lock")
			require.NotNil(t, h)
			require.True(t, h.Release())
			out := buf.String()
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
