package locktable

import (
	"cmp"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A waiting request waits for the conflicting requests queued ahead of it that it does not pass
// (docs/DESIGN.md §17.3): a shared key request for a key held shared waits for nothing
// but the exclusive range request queued ahead of it over the key, and a cycle through that edge
// is a deadlock (no cycle may persist among waiting Txns).

// lockIn is t's Lock of key in column family cf, or with end of the range [key, end) (end nil: no
// bound; ranged tells), as a Txn asks: flagOwnerHolds when it holds anything.
func (t *testTxn) lockIn(ctx context.Context, cf uint32, key, end []byte, ranged bool, o testOptions) (*Claim, error) {
	o.OwnerHolds = slices.ContainsFunc(t.claims, func(h *Claim) bool { return !h.dead() })
	h := &Claim{}
	if ranged {
		t.l.ten.PrepareRange(h, t, cf, key, end, o.ask())
	} else {
		t.l.ten.Prepare(h, t, cf, key, o.ask())
	}
	if _, err := h.Acquire(ctx, cmp.Or(o.Lease, defaultLease), cmp.Or(o.Timeout, defaultTimeout), true, false); err != nil {
		return nil, err
	}
	t.claims = append(t.claims, h)
	return h, nil
}

// lockInAsync is lockIn in a goroutine, under testutil.Go as txnLockResult; txn makes no other
// call until its result has arrived.
func (txn *testTxn) lockInAsync(t testing.TB, cf uint32, key, end []byte, ranged bool, o testOptions) <-chan lockResult {
	c := make(chan lockResult, 1)
	testutil.Go(t, context.Background(), func(ctx context.Context) {
		h, err := txn.lockIn(ctx, cf, key, end, ranged, o)
		c <- lockResult{h, err}
	})
	return c
}

// The cycle of t1 → t2 → t3 → t1: t1 holds b shared, t2 holds k, t3's exclusive range over b
// queues behind t1's share, t2's shared request for b queues behind t3's range, and t1 asks for k.
// k is in another column family than b, so t2 passes nothing (an owner's wait in another column
// family is not followed, DESIGN §17.2): its one edge is to t3's range, and t1's request closes
// the cycle through it. The closing request runs under a deadline, so that a missed cycle fails
// by name rather than sleep until a lease ends.
func TestSharedKeyRequestWaitsForTheExclusiveRangeQueuedAhead(t *testing.T) {
	const cfB, cfK = 1, 2
	for _, tc := range []struct {
		name       string
		start, end []byte
	}{
		{"range", []byte("a"), []byte("c")},
		{"prefix", []byte("b"), []byte("c")}, // Prefix("b")
		{"unbounded", []byte("a"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
			bg := context.Background()
			t1, t2, t3 := l.Begin(), l.Begin(), l.Begin()
			t1.name, t2.name, t3.name = "t1", "t2", "t3"
			t.Cleanup(t2.Rollback) // after the Locks started with lockInAsync
			t.Cleanup(t3.Rollback)
			_, err := t1.lockIn(bg, cfB, []byte("b"), nil, false, testOptions{Shared: true})
			require.NoError(t, err)
			_, err = t2.lockIn(bg, cfK, []byte("k"), nil, false, testOptions{})
			require.NoError(t, err)
			r3 := t3.lockInAsync(t, cfB, tc.start, tc.end, true, testOptions{})
			waitingCount(t, l, 1)
			r2 := t2.lockInAsync(t, cfB, []byte("b"), nil, false, testOptions{Shared: true})
			waitingCount(t, l, 2)
			require.Equal(t, 2, graphWaiting(l))

			ctx, cancel := context.WithTimeout(bg, 2*time.Second)
			defer cancel()
			_, err = t1.lockIn(ctx, cfK, []byte("k"), nil, false, testOptions{})
			var dl *DeadlockError
			require.ErrorAs(t, err, &dl, "t1 → t2 → t3 → t1 is a cycle (t2's shared request for b waits "+
				"for t3's exclusive range queued ahead of it), and t1's wait, which closes it, must fail with ErrDeadlock")
			assert.Equal(t, []string{"t1:k", "t2:b", "t3:" + string(tc.start)}, cycleOf(t, err))
			t1.Rollback()
			res := testutil.Await(t, r3, "t3's range once t1 rolled back")
			require.NoError(t, res.err, "t3's range is served before t2's request queued behind it")
			assert.True(t, testutil.NotReturned(r2), "t2's shared request stays behind t3's exclusive range")
			t3.Rollback()
			res = testutil.Await(t, r2, "t2's request once t3 rolled back")
			require.NoError(t, res.err)
		})
	}
}
