package locktable

import (
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Close waits for the stray fences of other goroutines, not for those of its own caller, which
// could end only once it returned; a fence that begins after it is refused.
func TestStrayFencesWaitForOtherGoroutinesOnly(t *testing.T) {
	var s strayFences
	entered, leave, left := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		require.True(t, s.enter())
		close(entered)
		<-leave
		s.leave()
		close(left)
	}()
	<-entered

	closed := make(chan struct{})
	go func() {
		s.closeAndWait()
		close(closed)
	}()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.closed
	}, 5*time.Second, time.Millisecond, "closeAndWait refuses later fences first")
	select {
	case <-closed:
		t.Fatal("closeAndWait returned while another goroutine's fence ran")
	default:
	}
	assert.False(t, s.enter(), "a fence after Close is refused")
	close(leave)
	<-left
	testutil.Await(t, closed, "closeAndWait, once the other goroutine's fence ended")

	var own strayFences
	require.True(t, own.enter())
	require.NoError(t, runUserCommit(func() error {
		own.closeAndWait() // returns while the caller's own fence runs
		return nil
	}))
	own.leave()
}
