package locktable

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Undo of an Extend that shortened the lease, once the shorter lease has ended: the earlier
// deadline it puts back must not revive it, whether the lapse was settled yet or not, and
// whether the claim was released first (its lapse then read off the deadline).
func TestUndoLeavesALeaseThatEndedSinceEnded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release bool
	}{
		{"lapsed, not yet settled", false},
		{"released, then lapsed", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := NewManualClock(time.Unix(1_700_000_000, 0))
			l := newTestLocker(t, newTestTable(t), clk)
			h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Minute})
			require.NoError(t, err)
			u, err := h.Extend(time.Second, false)
			require.NoError(t, err)
			if tc.release {
				require.True(t, h.Release())
			}
			clk.Advance(time.Second)
			if tc.release {
				require.True(t, h.Now().Expired(), "a released claim's lease lapses at its deadline")
			}
			u.Undo()
			if !h.Now().Expired() {
				t.Fatalf("the lease lapsed at Mono 1s, the deadline Extend set, and after the Undo of that Extend it is live again: once the deadline passes IsLeaseExpired is true for good")
			}
			ran := false
			if err := fence(h, func() error { ran = true; return nil }); ran {
				t.Fatalf("Fence ran its commit on a lease that lapsed before the Undo (err %v)", err)
			}
			require.False(t, h.Release())
		})
	}
}
