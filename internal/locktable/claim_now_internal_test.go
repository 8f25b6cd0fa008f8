package locktable

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/require"
)

// gatedClock is a ManualClock whose next paired reading (ReadClock), once armed, stops the
// caller in it: Extend takes that reading with the shard mutex held, after it found the lease
// live, and before it moves the deadline.
type gatedClock struct {
	*ManualClock
	gate func() // run once by the next paired reading, then disarmed; set before the reader runs
}

func (c *gatedClock) nowMono() (int64, time.Duration) {
	if g := c.gate; g != nil {
		c.gate = nil
		g()
	}
	return c.ManualClock.nowMono()
}

// blockedInNow reports whether a goroutine is inside Claim.Now waiting for a mutex: it has read
// the deadline without the mutex and now waits to settle what it read.
func blockedInNow() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "(*Claim).Now(") &&
			(strings.Contains(g, "(*Mutex).Lock") || strings.Contains(g, "(*Mutex).lockSlow")) {
			return true
		}
	}
	return false
}

// A Renew (Extend) that found the lease live keeps it, even if the deadline passes while it
// holds the shard mutex and a reader sees the old deadline passed before the new one is stored.
// That reader must settle what it saw under the mutex: reporting the lease ended while it lives
// on would let Fence run a commit after IsLeaseExpired returned true.
func TestNowThatSawTheOldDeadlineAgreesWithARenewRacingTheLapse(t *testing.T) {
	clk := &gatedClock{ManualClock: NewManualClock(time.Unix(1_700_000_000, 0))}
	l := newTestLocker(t, newTestTable(t), clk)
	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Second})
	require.NoError(t, err)
	defer h.Release()

	inExtend, resume := make(chan struct{}), make(chan struct{})
	clk.gate = func() { close(inExtend); <-resume }
	renewed := make(chan error, 1)
	go func() {
		_, err := h.Extend(time.Minute, false)
		renewed <- err
	}()
	<-inExtend // Extend holds the mutex and found the lease live at Mono 0; the deadline is 1s
	clk.Advance(time.Second)
	saw := make(chan Status, 1)
	go func() { saw <- h.Now() }()
	testutil.WaitUntil(t, "Now read the old deadline and waits for the shard mutex", blockedInNow)
	close(resume)
	require.NoError(t, testutil.Await(t, renewed, "the Renew"), "the Renew found the lease live before the deadline passed")
	st := testutil.Await(t, saw, "Now")

	ran := false
	err = fence(h, func() error { ran = true; return nil })
	switch {
	case st.Expired() && ran:
		t.Fatalf("Now reported the lease ended while a Renew that found it live kept it, and Fence then ran its commit: once IsLeaseExpired is true it stays true and Fence refuses")
	case st.Expired():
		t.Fatalf("Now reported the lease ended at Mono 1s, though the Renew that found it live moved the deadline to 1m (Fence: %v)", err)
	case !ran || err != nil:
		t.Fatalf("Fence of a lease renewed to 1m refused at Mono 1s: %v", err)
	}
}
