package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A claim given back is waited on no more (WaitedOn), though its key stays in the table with a
// request queued for it: giving a key back, exclusive or shared, ends the claim's tie to the
// key's entry. A Txn's commit asks it of every lock the Txn took, released ones too (§5.4).
func TestClaimGivenBackIsNotWaitedOn(t *testing.T) {
	ctx := context.Background()
	key := []byte("k")
	t.Run("exclusive", func(t *testing.T) {
		clk := NewManualClock(time.Unix(1, 0))
		l := newTestLocker(t, newTestTable(t), clk)
		first, err := l.TryLock(key, testOptions{})
		require.NoError(t, err)
		gotSecond := lockAsync(ctx, l, key, testOptions{})
		WaitQueued(t, l, key, 1)
		gotThird := lockAsync(ctx, l, key, testOptions{})
		WaitQueued(t, l, key, 2)
		require.True(t, first.WaitedOn())
		clk.Advance(2 * bargeWindow) // the second is granted directly as first lets go

		require.True(t, first.Release())
		assert.False(t, first.WaitedOn(), "an exclusive claim given back reports the request queued for its key")
		require.True(t, granted(t, gotSecond, "the second, once first let go").Release())
		require.True(t, granted(t, gotThird, "the third, once the second let go").Release())
		assert.True(t, ProbeTableEmpty(l))
	})
	t.Run("shared", func(t *testing.T) {
		l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
		first, err := l.TryLock(key, testOptions{Shared: true})
		require.NoError(t, err)
		second, err := l.TryLock(key, testOptions{Shared: true})
		require.NoError(t, err)
		gotThird := lockAsync(ctx, l, key, testOptions{})
		WaitQueued(t, l, key, 1)
		require.True(t, first.WaitedOn())

		require.True(t, first.Release())
		assert.False(t, first.WaitedOn(), "a share given back reports the request queued for its key")
		require.True(t, second.Release())
		require.True(t, granted(t, gotThird, "the exclusive request, once both sharers let go").Release())
		assert.True(t, ProbeTableEmpty(l))
	})
}
