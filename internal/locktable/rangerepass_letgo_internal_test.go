package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/testutil"
)

// An owner that lets go of a key in a home shard, shared or exclusive, has the space's queues
// gone over at once (ownerLetGo), not only when a later give-back of another owner does: t1
// holds a shared, t3 holds b, a plain handle holds c shared; an exclusive range over every key
// queues behind them, and t3 then t1 ask c exclusive, both passing the range. Once t3 lets go of
// b, t3's request waits for the range and the range for t1's a, so t1 must be moved ahead of t3
// then: the plain handle's release of c, which has no owner, goes over nothing, and t1 left
// behind t3 would wait in a cycle no one rechecks.
func TestOwnerLettingGoOfAHomeKeyMovesThePasserAhead(t *testing.T) {
	for _, mode := range []struct {
		name string
		o    testOptions
	}{{"shared", testOptions{Shared: true}}, {"exclusive", testOptions{}}} {
		t.Run(mode.name, func(t *testing.T) {
			l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
			t1, t3 := &testTxn{l: l, name: "t1"}, &testTxn{l: l, name: "t3"}
			ctx := context.Background()
			_, err := t1.Lock(ctx, []byte("a"), testOptions{Shared: true})
			require.NoError(t, err)
			b3, err := t3.Lock(ctx, []byte("b"), mode.o)
			require.NoError(t, err)
			c, err := l.TryLock([]byte("c"), testOptions{Shared: true})
			require.NoError(t, err)
			gotRange, got3, got1 := queueRangeThenTwo(t, l, []byte("c"), t3, t1)

			require.True(t, b3.Release())
			sh := c.shard()
			sh.mu.Lock()
			head := c.e.head
			moved := head != nil && head.h.owner == t1 && head.next != nil && head.next.h.owner == t3
			sh.mu.Unlock()
			require.True(t, moved, "t1's request, which the range waits for, was not moved ahead of t3's "+
				"as t3 let go of b (DESIGN §17.2)")

			require.True(t, c.Release())
			res1 := testutil.Await(t, got1, "t1's exclusive c, once the plain handle let go")
			require.NoError(t, res1.err)
			assert.True(t, testutil.NotReturned(got3), "t3 waits for the range now")
			t1.Rollback()
			res := testutil.Await(t, gotRange, "the range, once t1 let go")
			require.NoError(t, res.err)
			require.True(t, res.h.Release())
			res3 := testutil.Await(t, got3, "t3's exclusive c, once the range let go")
			require.NoError(t, res3.err)
			t3.Rollback()
			assert.True(t, ProbeTableEmpty(l))
		})
	}
}
