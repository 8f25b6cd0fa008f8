package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A shared request's edge goes to the nearest exclusive request of a Txn queued ahead of it and,
// past an exclusive request outside any Txn, to the key's holders too: under FIFO it is granted
// after all of them (docs/DESIGN.md §13). This builds the state the DeadlockStress port with
// mixed modes once froze in, with the same names:
//
//	key019: held exclusively by w0-9; queued: w4-8 (exclusive), w3-11 (shared)
//	key016: held shared by w3-11;    queued: w5-12 (exclusive), a lock outside any Txn
//	        (exclusive), w0-9 (shared)
//
// w0-9's shared request waits past the outside lock for w5-12 and for w3-11, the holder. So
// w3-11's request closes w3-11 → w0-9 → w5-12 → w3-11 (or the same through w4-8, the writer
// it queued behind) and fails at once, rather than the cycle sitting until the outside lock's
// timeout. When the outside lock then leaves, w0-9's edge moves and is checked again: the cycle is
// gone, so nothing else fails, and rolling the Txns back lets everything through.
func TestDeadlockClosedByMovedSharedEdge(t *testing.T) {
	leaves := map[string]func(clk *ManualClock, cancel context.CancelFunc){
		"it times out":    func(clk *ManualClock, _ context.CancelFunc) { clk.Advance(time.Second) },
		"it is cancelled": func(_ *ManualClock, cancel context.CancelFunc) { cancel() },
	}
	shared := testOptions{Shared: true}
	for name, leave := range leaves {
		t.Run("the lock ahead leaves: "+name, func(t *testing.T) {
			clk := NewManualClock(time.Unix(1, 0))
			l := newTestLocker(t, newTestTable(t), clk)
			ctx := context.Background()
			k19, k16 := []byte("key019"), []byte("key016")
			w09, w311 := &testTxn{l: l, name: "w0-9"}, &testTxn{l: l, name: "w3-11"}
			w48, w512 := &testTxn{l: l, name: "w4-8"}, &testTxn{l: l, name: "w5-12"}
			for _, txn := range []*testTxn{w09, w311, w48, w512} {
				t.Cleanup(txn.Rollback)
			}

			_, err := w09.Lock(ctx, k19, testOptions{})
			require.NoError(t, err)
			_, err = w311.Lock(ctx, k16, shared)
			require.NoError(t, err)
			r512 := txnLockResult(t, w512, k16, testOptions{})
			WaitQueued(t, l, k16, 1)
			outCtx, cancelOut := context.WithCancel(ctx)
			defer cancelOut()
			out := lockAsync(outCtx, l, k16, testOptions{Timeout: time.Second})
			WaitQueued(t, l, k16, 2)
			r09 := txnLockResult(t, w09, k16, shared)
			WaitQueued(t, l, k16, 3)
			r48 := txnLockResult(t, w48, k19, testOptions{})
			WaitQueued(t, l, k19, 1)
			r311 := txnLockResult(t, w311, k19, shared)
			names := cycleOf(t, testutil.Await(t, r311, "w3-11, whose request closed the cycle").err)
			require.NotEmpty(t, names)
			assert.Equal(t, "w3-11:key019", names[0], "the cycle starts with the Txn whose request failed")
			assert.Contains(t, names, "w0-9:key016", "the cycle runs through w0-9's shared request")
			for _, c := range []<-chan lockResult{r512, r09, r48} {
				require.True(t, testutil.NotReturned(c), "exactly one Txn of the cycle fails")
			}

			leave(clk, cancelOut)
			require.Error(t, testutil.Await(t, out, "the lock outside any Txn").err)
			WaitQueued(t, l, k16, 2)
			for _, c := range []<-chan lockResult{r512, r09, r48} {
				assert.True(t, testutil.NotReturned(c), "no cycle is left, so every Txn waits")
			}

			// w3-11 kept its lock; rolling it back lets the rest through.
			w311.Rollback()
			granted(t, r512, "w5-12")
			w512.Rollback()
			granted(t, r09, "w0-9")
			w09.Rollback()
			granted(t, r48, "w4-8")
			w48.Rollback()
			assert.True(t, ProbeTableEmpty(l))
		})
	}
}
