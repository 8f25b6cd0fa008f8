package locktable

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A shared request queued behind an exclusive request outside any Txn cannot be granted before
// that request, which needs every holder gone, nor before the exclusive requests of Txns queued
// further ahead (docs/DESIGN.md §13). So its Txn waits for those holders and Txns, and a cycle
// through them is found when it closes, not left to persist until the outside request times out.
//
// hot is held shared by t3; t1's exclusive request (in one case) and then a Lock outside any Txn
// queue for it, then t2's shared request; t2 holds other. When t3 asks for other, t3 → t2 → t3
// (and t3 → t2 → t1 → t3) closes and t3's request fails.
func TestSharedRequestWaitsPastRequestOfNoOwner(t *testing.T) {
	for _, tc := range []struct {
		name         string
		txnExclusive bool // a Txn's exclusive request queues ahead of the one of no owner
	}{
		{name: "only the request of no owner ahead"},
		{name: "a Txn's exclusive request further ahead", txnExclusive: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := newTestTable(t)
			l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			hot, other := []byte("hot"), []byte("other")
			t1, t2, t3 := l.Begin(), l.Begin(), l.Begin()
			_, err := t3.Lock(ctx, hot, testOptions{Shared: true})
			require.NoError(t, err)
			_, err = t2.Lock(ctx, other, testOptions{})
			require.NoError(t, err)

			queued, inGraph := 0, 0
			var t1Done chan error
			if tc.txnExclusive {
				t1Done = make(chan error, 1)
				go func() {
					_, err := t1.Lock(ctx, hot, testOptions{})
					t1.Rollback()
					t1Done <- err
				}()
				queued, inGraph = queued+1, inGraph+1
				WaitQueued(t, l, hot, queued)
				require.Eventually(t, func() bool { return graphWaiting(l) == inGraph },
					10*time.Second, 100*time.Microsecond)
			}
			outside := lockAsync(ctx, l, hot, testOptions{})
			queued++
			WaitQueued(t, l, hot, queued)
			t2Done := make(chan error, 1)
			go func() {
				_, err := t2.Lock(ctx, hot, testOptions{Shared: true})
				t2.Rollback()
				t2Done <- err
			}()
			queued, inGraph = queued+1, inGraph+1
			WaitQueued(t, l, hot, queued)
			require.Eventually(t, func() bool { return graphWaiting(l) == inGraph },
				10*time.Second, 100*time.Microsecond)

			t3Done := make(chan error, 1)
			go func() {
				_, err := t3.Lock(ctx, other, testOptions{})
				t3Done <- err
			}()
			err = testutil.Await(t, t3Done, "t3's request, which closes a cycle through t2's shared request")
			var dl *DeadlockError
			require.True(t, errors.As(err, &dl), "t3's request got %v, not a deadlock", err)
			require.NotEmpty(t, dl.Cycle)
			assert.Equal(t, Owner(t3), dl.Cycle[0].Owner)
			owners := map[Owner]bool{}
			for _, w := range dl.Cycle {
				owners[w.Owner] = true
			}
			assert.True(t, owners[t2], "the cycle runs through t2's shared request: %v", dl.Cycle)

			// Breaking the cycle lets everything through in queue order.
			t3.Rollback()
			if tc.txnExclusive {
				require.NoError(t, testutil.Await(t, t1Done, "t1's request"))
			}
			r := testutil.Await(t, outside, "the request outside any Txn")
			require.NoError(t, r.err)
			r.h.Release()
			require.NoError(t, testutil.Await(t, t2Done, "t2's request"))
			assert.True(t, ProbeTableEmpty(l))
		})
	}
}
