package recordlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// A shared request's edge goes to the nearest exclusive request of a Txn queued ahead of it and,
// past an exclusive request outside any Txn, to the key's holders too: under FIFO it is granted
// after all of them (docs/DESIGN.md §13). This builds the state the DeadlockStress port with
// mixed modes once froze in, with the same names:
//
//	key019: held exclusively by w0-9; queued: w4-8 (exclusive), w3-11 (shared)
//	key016: held shared by w3-11;    queued: w5-12 (exclusive), a Lock outside any Txn
//	        (exclusive), w0-9 (shared)
//
// w0-9's shared request waits past the outside Lock for w5-12 and for w3-11, the holder. So
// w3-11's request closes w3-11 → w0-9 → w5-12 → w3-11 (or the same through w4-8, the writer
// it queued behind) and fails at once, rather than the cycle sitting until the outside Lock's
// timeout. When the outside Lock then leaves, w0-9's edge moves and is checked again: the cycle is
// gone, so nothing else fails, and rolling the Txns back lets everything through.
func TestDeadlockClosedByMovedSharedEdge(t *testing.T) {
	leaves := map[string]func(clk *recordlock.ManualClock, cancel context.CancelFunc){
		"it times out":    func(clk *recordlock.ManualClock, _ context.CancelFunc) { clk.Advance(time.Second) },
		"it is cancelled": func(_ *recordlock.ManualClock, cancel context.CancelFunc) { cancel() },
	}
	for name, leave := range leaves {
		t.Run("the Lock ahead leaves: "+name, func(t *testing.T) {
			db := openDB(t)
			clk, l := manual(t, db)
			ctx := context.Background()
			k19, k16 := []byte("key019"), []byte("key016")
			w09, w311 := txnNamed(t, l, "w0-9"), txnNamed(t, l, "w3-11")
			w48, w512 := txnNamed(t, l, "w4-8"), txnNamed(t, l, "w5-12")

			_, err := w09.Lock(ctx, k19, recordlock.Options{})
			require.NoError(t, err)
			_, err = w311.Lock(ctx, k16, shared)
			require.NoError(t, err)
			r512 := txnLockAsync(w512, k16, recordlock.Options{})
			waitQueued(t, l, k16, 1)
			outCtx, cancelOut := context.WithCancel(ctx)
			defer cancelOut()
			out := lockAsync(outCtx, l, k16, recordlock.Options{Timeout: time.Second})
			waitQueued(t, l, k16, 2)
			r09 := txnLockAsync(w09, k16, shared)
			waitQueued(t, l, k16, 3)
			r48 := txnLockAsync(w48, k19, recordlock.Options{})
			waitQueued(t, l, k19, 1)
			r311 := txnLockAsync(w311, k19, shared)
			r := await(t, r311, "w3-11, whose request closed the cycle")
			var dl *recordlock.DeadlockError
			require.ErrorAs(t, r.err, &dl)
			require.ErrorIs(t, r.err, recordlock.ErrDeadlock)
			var names []string
			for _, w := range dl.Cycle {
				names = append(names, w.Txn)
			}
			require.NotEmpty(t, names)
			assert.Equal(t, "w3-11", names[0], "the cycle starts with the Txn whose request failed")
			assert.Contains(t, names, "w0-9", "the cycle runs through w0-9's shared request")
			for _, c := range []<-chan lockResult{r512, r09, r48} {
				require.True(t, notReturned(c), "exactly one Txn of the cycle fails")
			}

			leave(clk, cancelOut)
			require.Error(t, await(t, out, "the Lock outside any Txn").err)
			waitQueued(t, l, k16, 2)
			for _, c := range []<-chan lockResult{r512, r09, r48} {
				assert.True(t, notReturned(c), "no cycle is left, so every Txn waits")
			}

			// w3-11 kept its lock; rolling it back lets the rest through.
			w311.Rollback()
			granted(t, r512, "w5-12")
			w512.Rollback()
			granted(t, r09, "w0-9")
			w09.Rollback()
			granted(t, r48, "w4-8")
			w48.Rollback()
			assert.True(t, recordlock.ProbeTableEmpty(l))
		})
	}
}
