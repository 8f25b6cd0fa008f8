package locktable

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/testutil"
)

// awaitWaitingForFence waits until a call on h waits for h's running fence to end, failing with
// rule if the call reports on early first.
func awaitWaitingForFence(t *testing.T, h *Claim, early <-chan bool, rule string) {
	t.Helper()
	testutil.WaitUntil(t, "a call waits for the running fence", func() bool {
		select {
		case <-early:
			t.Fatal(rule)
		default:
		}
		sh := h.lockShard()
		defer sh.mu.Unlock()
		return h.cold != nil && h.cold.fenceEnd != nil
	})
}

// A Release made from inside a user's commit, of another claim whose trusted fence (a Txn's
// write) runs in another goroutine, waits for that commit: the frame of a user's commit on the
// stack excuses a caller from waiting only for a user's fence, which may be its own; a trusted
// one runs no user code, so it is never the caller's (docs/DESIGN.md §5.1).
func TestReleaseInsideAUserCommitWaitsForAnotherClaimsTrustedFence(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1e9, 0)))
	outer, err := l.TryLock([]byte("outer"), testOptions{Lease: time.Hour})
	require.NoError(t, err)
	written, err := l.TryLock([]byte("written"), testOptions{Lease: time.Hour})
	require.NoError(t, err)
	// A user's fence that ran before leaves the claim marked as fenced by no user's commit.
	require.NoError(t, fence(written, func() error { return nil }))

	inTrusted, endTrusted := make(chan struct{}), make(chan struct{})
	endTrustedFence := sync.OnceFunc(func() { close(endTrusted) })
	t.Cleanup(endTrustedFence) // before the Locker closes, which waits for the fence
	trusted := make(chan error, 1)
	go func() {
		trusted <- written.FenceTrusted(func() error { close(inTrusted); <-endTrusted; return nil })
	}()
	<-inTrusted
	released := make(chan bool, 1)
	outerFenced := make(chan error, 1)
	go func() {
		outerFenced <- fence(outer, func() error { released <- written.Release(); return nil })
	}()

	awaitWaitingForFence(t, written, released,
		"a Release from inside a user's commit did not wait for another claim's trusted fence")
	endTrustedFence()
	require.NoError(t, testutil.Await(t, trusted, "the trusted fence's end"))
	require.True(t, testutil.Await(t, released, "the Release after the trusted fence"))
	require.NoError(t, testutil.Await(t, outerFenced, "the user's fence's end"))
}

// jumpingClock is a ManualClock whose next Mono read, once a jump is set, moves it on by that
// much right after reading it, without running timers: time that passes between two reads.
type jumpingClock struct {
	*ManualClock
	jump atomic.Int64
}

func (c *jumpingClock) Mono() time.Duration {
	m := c.ManualClock.Mono()
	if d := c.jump.Swap(0); d > 0 {
		c.ManualClock.mu.Lock()
		c.ManualClock.mono += time.Duration(d)
		c.ManualClock.mu.Unlock()
	}
	return m
}

// A Release that waited for a fence of another goroutine reads the clock again and takes effect
// then: a lease that lapsed while it waited, after the fence's end found it live, is not given
// back as released; Release settles the lapse and returns false (docs/DESIGN.md §4.5).
func TestReleaseAfterWaitingForAFenceReadsTheClockAgain(t *testing.T) {
	tab := newTestTable(t)
	clk := &jumpingClock{ManualClock: NewManualClock(time.Unix(1e9, 0))}
	l := newTestLocker(t, tab, clk)
	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Second})
	require.NoError(t, err)

	inFence, endFence := make(chan struct{}), make(chan struct{})
	endTheFence := sync.OnceFunc(func() { close(endFence) })
	t.Cleanup(endTheFence) // before the Locker closes, which waits for the fence
	fenced := make(chan error, 1)
	go func() { fenced <- fence(h, func() error { close(inFence); <-endFence; return nil }) }()
	<-inFence
	released := make(chan bool, 1)
	go func() { released <- h.Release() }()
	awaitWaitingForFence(t, h, released, "a Release did not wait for the running fence")

	// The fence's end reads the clock once and finds the lease live; the lease lapses right after.
	clk.jump.Store(int64(2 * time.Second))
	endTheFence()
	require.NoError(t, testutil.Await(t, fenced, "the fence's end"))
	require.False(t, testutil.Await(t, released, "the Release after the fence"),
		"a Release that waited for a fence took effect at the clock reading from before the wait")
	require.True(t, h.Now().Expired(), "the lease that lapsed while Release waited was not settled")
}

// A Release from its own fence's commit closes Done and takes the lease off the scheduler at
// once, as any Release does: once the fence ends and the key has passed on, nothing of the claim
// is left to fire at its deadline (docs/DESIGN.md §4.3, §4.5, §5.1). A request queued behind the
// claim has its lease watched.
func TestReleaseInOwnFenceClosesDoneAndLeavesTheScheduler(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1e9, 0)))
	key := []byte("k")
	h, err := l.TryLock(key, testOptions{Lease: time.Hour})
	require.NoError(t, err)
	next := lockAsync(context.Background(), l, key, testOptions{Lease: time.Hour, Timeout: time.Hour})
	WaitQueued(t, l, key, 1)

	done := h.Done()
	var released, doneClosed bool
	require.NoError(t, fence(h, func() error {
		released = h.Release()
		select {
		case <-done:
			doneClosed = true
		default:
		}
		return nil
	}))
	require.True(t, released, "a Release from its own fence's commit failed")
	require.True(t, doneClosed, "a Release from its own fence's commit left Done open: the claim stops authorizing writes at once")
	granted(t, next, "the key passed on as the fence ended").Release()
	require.True(t, ProbeTableEmpty(l), "a claim released by its own fence's commit stayed on the scheduler")
}

// A Fence that finds another goroutine's fence running on its claim waits for it and then runs
// its own; the wait's channel belongs to the fence it waited for, so the second fence's end, and
// any wait for it, starts afresh (docs/DESIGN.md §5.1).
func TestFenceAfterWaitingForAnotherFenceRunsAndEnds(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1e9, 0)))
	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Hour})
	require.NoError(t, err)

	inFirst, endFirst := make(chan struct{}), make(chan struct{})
	endFirstFence := sync.OnceFunc(func() { close(endFirst) })
	t.Cleanup(endFirstFence) // before the Locker closes, which waits for the fence
	first := make(chan error, 1)
	go func() { first <- h.FenceTrusted(func() error { close(inFirst); <-endFirst; return nil }) }()
	<-inFirst
	// The second fence's commit reports whether it found the wait's channel of the first fence
	// still on the claim, and takes it off if so: the second fence's end would close it again.
	secondFresh := make(chan bool, 1)
	second := make(chan error, 1)
	go func() {
		second <- h.FenceTrusted(func() error {
			sh := h.lockShard()
			stale := h.cold != nil && h.cold.fenceEnd != nil
			if stale {
				h.cold.fenceEnd = nil
			}
			sh.mu.Unlock()
			secondFresh <- !stale
			return nil
		})
	}()
	awaitWaitingForFence(t, h, secondFresh, "a Fence ran while another goroutine's fence ran on its claim")
	endFirstFence()
	require.NoError(t, testutil.Await(t, first, "the first fence's end"))
	require.NoError(t, testutil.Await(t, second, "the second fence's end"))
	require.True(t, <-secondFresh, "the channel a fence's waiters waited on outlived that fence: the next fence's end closes it again")
	require.True(t, h.Release(), "the claim was not live after both fences")
}
