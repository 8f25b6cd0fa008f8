package recordlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// node is the options of most locks here: node scope, default lease and timeout.
var node = recordlock.Options{Scope: recordlock.ScopeNode}

// lazyClock is a ManualClock whose timers never run, so every expiry is found lazily, as when the
// timer goroutine is starved.
type lazyClock struct{ *recordlock.ManualClock }

func (lazyClock) AfterFunc(time.Duration, func()) recordlock.Timer { return noTimer{} }

type noTimer struct{}

func (noTimer) Stop() bool { return true }

// TestReleaseHookFiredByFenceMayCallFence is the regression test for what
// TestReleaseHookCallingBackIntoLocker caught: a release hook fired by Fence itself (the lease
// lapsed inside commit, or Fence found it lapsed) ran while Fence still held the handle's fence
// mutex, so a hook that called Fence on its handle deadlocked.
func TestReleaseHookFiredByFenceMayCallFence(t *testing.T) {
	for _, lazy := range []bool{false, true} {
		t.Run(fmt.Sprintf("found lazily=%v", lazy), func(t *testing.T) {
			db := openDB(t)
			clk := recordlock.NewManualClock(epoch)
			var c recordlock.Clock = clk
			if lazy {
				c = lazyClock{clk}
			}
			l := newLocker(t, db, recordlock.WithClock(c))
			h, err := l.TryLock([]byte("k"), node)
			require.NoError(t, err)
			var inner error
			require.True(t, h.JoinClusterRound(l.Timestamp(), recordlock.MinLease, clk.Mono(), func() error {
				inner = h.Fence(func() error { return nil })
				return nil
			}))
			done := make(chan error, 1)
			go func() {
				if lazy {
					clk.Advance(time.Second) // no timer runs: Fence finds the lapse itself
					done <- h.Fence(func() error { return nil })
					return
				}
				done <- h.Fence(func() error { clk.Advance(time.Second); return nil })
			}()
			select {
			case err := <-done:
				if lazy {
					require.ErrorIs(t, err, recordlock.ErrLeaseExpired)
				} else {
					require.NoError(t, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a release hook fired by Fence deadlocked calling Fence")
			}
			require.ErrorIs(t, inner, recordlock.ErrLeaseExpired)
			assert.True(t, recordlock.ProbeTableEmpty(l))
		})
	}
}
