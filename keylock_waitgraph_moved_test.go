package recordlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// A shared request's edge goes to the nearest exclusive request queued ahead of it. When that
// request leaves the queue without being granted, the edge moves to the next one ahead, which
// can be a waiting Txn: the cycle that move closes must be found as a new wait's is
// (docs/DESIGN.md §13). This builds the frozen state the DeadlockStress port with mixed modes
// once reached, with the same names:
//
//	key019: held exclusively by w0-9; queued: w4-8 (exclusive), w3-11 (shared)
//	key016: held shared by w3-11;    queued: w5-12 (exclusive), a Lock outside any Txn
//	        (exclusive), w0-9 (shared)
//
// While the outside Lock is queued, w0-9's edge goes to it and ends there (a wait outside any
// Txn is left to its timeout), so no cycle exists and none is reported. When it leaves, w0-9's
// edge moves to w5-12 and closes w0-9 → w5-12 → w3-11 → w0-9 (and, through w3-11's edge to the
// writer it queued behind, w0-9 → w5-12 → w3-11 → w4-8 → w0-9); w0-9 must fail with ErrDeadlock
// at once, not sit until a lease or a timeout ends the cycle.
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
			waitQueued(t, l, k19, 2)
			for _, c := range []<-chan lockResult{r512, r09, r48, r311} {
				require.True(t, notReturned(c), "no cycle yet, so every Txn waits")
			}

			leave(clk, cancelOut)
			require.Error(t, await(t, out, "the Lock outside any Txn").err)
			r := await(t, r09, "w0-9, whose moved edge closed the cycle")
			var dl *recordlock.DeadlockError
			require.ErrorAs(t, r.err, &dl)
			require.ErrorIs(t, r.err, recordlock.ErrDeadlock)
			var names []string
			for _, w := range dl.Cycle {
				names = append(names, w.Txn)
			}
			assert.Equal(t, []string{"w0-9", "w5-12", "w3-11"}, names)
			for _, c := range []<-chan lockResult{r512, r48, r311} {
				assert.True(t, notReturned(c), "exactly one Txn of the cycle fails")
			}

			// w0-9 kept its lock; rolling it back lets the rest through.
			w09.Rollback()
			granted(t, r48, "w4-8")
			w48.Rollback()
			granted(t, r311, "w3-11")
			w311.Rollback()
			granted(t, r512, "w5-12")
			w512.Rollback()
			assert.True(t, recordlock.ProbeTableEmpty(l))
		})
	}
}
