package recordlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// Range locks as Stats, Locks and Waits show them (docs/DESIGN.md §16.1): a range is one holder,
// its Key is its Start and RangeEnd its End (nil with no bound), and its Waiters are the queued
// requests that conflict with it.
func TestStatsLocksWaitsOfRanges(t *testing.T) {
	_, clk, l, other := lockerPair(t)
	ctx := context.Background()
	txn := txnNamed(t, l, "ranger")
	bounded, err := txn.LockRange(ctx, rng("a", "c"), node)
	require.NoError(t, err)
	unbounded, err := l.LockRange(ctx, rng("m", ""), shared)
	require.NoError(t, err)
	key, err := l.Lock(ctx, []byte("k"), node)
	require.NoError(t, err)
	st := l.Stats()
	assert.Equal(t, 3, st.Held, "a range counts once")
	assert.EqualValues(t, 3, st.Acquired)

	b := lockAsync(ctx, other, []byte("b"), wait)
	waitingCount(t, l, 1)
	clk.Advance(time.Second)
	over := lockRangeAsync(ctx, other, rng("bb", "n"), wait) // conflicts with both ranges
	waitingCount(t, l, 2)
	x, err := other.TryLock([]byte("x"), shared)
	require.NoError(t, err, "a shared key inside the shared range")

	locks := map[string]recordlock.LockInfo{}
	for _, info := range collectLocks(l) {
		locks[string(info.Key)] = info
	}
	require.Len(t, locks, 4)
	a := locks["a"]
	assert.True(t, a.IsRange)
	assert.Equal(t, []byte("c"), a.RangeEnd)
	assert.Equal(t, "ranger", a.Owner)
	assert.False(t, a.Shared)
	assert.Equal(t, 2, a.Waiters, "the key b and the range [bb, n) conflict with [a, c)")
	m := locks["m"]
	assert.True(t, m.IsRange)
	assert.Nil(t, m.RangeEnd, "no upper bound")
	assert.True(t, m.Shared)
	assert.Equal(t, 1, m.Waiters, "only [bb, n) conflicts with [m, ∞)")
	k := locks["k"]
	assert.False(t, k.IsRange)
	assert.Nil(t, k.RangeEnd)
	assert.Equal(t, 1, k.Waiters, "[bb, n) waits for k")
	assert.False(t, locks["x"].IsRange)
	assert.Zero(t, locks["x"].Waiters, "x is outside [bb, n)")

	waits := collectWaits(l)
	require.Len(t, waits, 2)
	byKey := map[string]recordlock.WaitInfo{}
	for _, w := range waits {
		byKey[string(w.Key)] = w
	}
	assert.Equal(t, recordlock.WaitInfo{Key: []byte("b"), Waited: time.Second}, byKey["b"])
	assert.Equal(t, recordlock.WaitInfo{Key: []byte("bb"), IsRange: true, RangeEnd: []byte("n")}, byKey["bb"])

	a.RangeEnd[0] = 'z'
	for _, info := range collectLocks(l) {
		if string(info.Key) == "a" {
			assert.Equal(t, []byte("c"), info.RangeEnd, "RangeEnd is a copy")
		}
	}

	txn.Rollback()
	require.True(t, granted(t, b, "b").Release())
	require.True(t, x.Release())
	require.True(t, unbounded.Release())
	require.True(t, key.Release())
	require.True(t, granted(t, over, "[bb, n)").Release())
	assert.True(t, bounded.IsExpired())
	assert.Zero(t, l.Stats().Held)
	assert.True(t, recordlock.ProbeTableEmpty(l))
}
