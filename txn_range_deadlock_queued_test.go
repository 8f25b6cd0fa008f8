package recordlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// A cycle through an exclusive range request queued ahead of a shared key request is a deadlock
// (docs/DESIGN.md §17.2): t1 holds b shared, t2 holds k, t3's exclusive range over b
// queues behind t1's share, t2's shared request for b queues behind t3's range, and t1 asks for k.
// t3's range waits for t2 only through t1's wait: with k in another column family the rule's
// exception does not follow that wait at all, and within one it ends at t2's k, above the b t2
// asks, so t2, which locks out of key order, passes nothing either way. It stays behind t3's range,
// and t1's request closes t1 → t2 → t3 → t1 and must fail at once rather than sleep until a lease
// ends. t3 is granted once t1 rolls back, and t2 once t3 does. The closing request runs under a
// deadline, so that a missed cycle fails by its rule.
func TestTxnDeadlockThroughExclusiveRangeQueuedAhead(t *testing.T) {
	ranges := []struct {
		name string
		r    recordlock.Range
	}{
		{"range", recordlock.Range{Start: []byte("a"), End: []byte("c")}},
		{"prefix", recordlock.Prefix([]byte("b"))},
	}
	for _, families := range []string{"one column family", "two column families"} {
		for _, tc := range ranges {
			t.Run(families+"/"+tc.name, func(t *testing.T) {
				db, cfs := openCFDB(t, "records", "index")
				l := newLocker(t, db)
				cfB, cfK := cfs[0], cfs[1]
				if families == "one column family" {
					cfK = cfB
				}
				bg := context.Background()
				sh := recordlock.Options{Shared: true}
				begin := func(name string) *recordlock.Txn {
					txn, err := l.BeginTx(recordlock.TxnOptions{Name: name})
					require.NoError(t, err)
					return txn
				}
				t1, t2, t3 := begin("t1"), begin("t2"), begin("t3")
				defer t1.Rollback()
				t.Cleanup(t2.Rollback) // after the goroutines that lock for t2 and t3 (testutil.Go)
				t.Cleanup(t3.Rollback)
				_, err := t1.LockCF(bg, cfB, []byte("b"), sh)
				require.NoError(t, err)
				_, err = t2.LockCF(bg, cfK, []byte("k"), recordlock.Options{})
				require.NoError(t, err)
				r3 := make(chan lockResult, 1)
				testutil.Go(t, bg, func(ctx context.Context) {
					h, err := t3.LockRangeCF(ctx, cfB, tc.r, recordlock.Options{})
					r3 <- lockResult{h, err}
				})
				waitingCount(t, l, 1)
				r2 := make(chan lockResult, 1)
				testutil.Go(t, bg, func(ctx context.Context) {
					h, err := t2.LockCF(ctx, cfB, []byte("b"), sh)
					r2 <- lockResult{h, err}
				})
				waitingCount(t, l, 2)

				ctx, cancel := context.WithTimeout(bg, 2*time.Second)
				defer cancel()
				_, err = t1.LockCF(ctx, cfK, []byte("k"), recordlock.Options{})
				require.ErrorIs(t, err, recordlock.ErrDeadlock, "t1 → t2 → t3 → t1 is a cycle (t2, which "+
					"holds k and asks b, must not pass t3's exclusive range through t1's wait); t1's wait closes it and must fail at once")
				var dl *recordlock.DeadlockError
				require.ErrorAs(t, err, &dl)
				assert.Len(t, dl.Cycle, 3)
				assert.True(t, testutil.NotReturned(r2), "t2's shared request stays behind t3's exclusive range")
				t1.Rollback()
				require.NoError(t, testutil.Await(t, r3, "t3's range once t1 rolled back").err,
					"t3's range is served before t2's request queued behind it")
				assert.True(t, testutil.NotReturned(r2), "t2's shared request stays behind t3's exclusive range")
				t3.Rollback()
				require.NoError(t, testutil.Await(t, r2, "t2's request once t3 rolled back").err)
			})
		}
	}
}
