package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// indexedKeys is the keys of sp's index of keys, in order, and how many of them are orphans.
func indexedKeys(sp *rangeSpace) (keys []string, orphans int) {
	sp.home.mu.Lock()
	defer sp.home.mu.Unlock()
	sp.keys.Ascend(func(e *keyEntry) bool {
		if e.space != sp {
			keys = append(keys, "(an entry out of the table)")
			return true
		}
		keys = append(keys, string(e.homeKey()))
		return true
	})
	return keys, len(sp.orphans)
}

// A key under a range is in its space's index of keys for exactly as long as it is held or waited
// on: it leaves the index as its entry leaves the table, an orphan leaves its retired span then,
// and a key taken again comes back in.
func TestHomeEntryLeavesTheSpaceIndexWithTheTable(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
	ctx := context.Background()
	shared := testOptions{Shared: true}
	r, err := l.TryLockRange("a", "z", shared)
	require.NoError(t, err)
	sp := tab.spaceOf(0)
	b, err := l.Lock(ctx, []byte("b"), shared)
	require.NoError(t, err)
	c, err := l.Lock(ctx, []byte("c"), shared)
	require.NoError(t, err)
	keys, _ := indexedKeys(sp)
	assert.Equal(t, []string{"b", "c"}, keys)

	require.True(t, b.Release())
	keys, _ = indexedKeys(sp)
	require.Equal(t, []string{"c"}, keys, "a key given back leaves the index with the table")

	require.True(t, r.Release())
	keys, orphans := indexedKeys(sp)
	assert.Equal(t, []string{"c"}, keys, "a key held as its range ends stays, an orphan")
	assert.Equal(t, 1, orphans)
	require.True(t, c.Release())
	keys, orphans = indexedKeys(sp)
	require.Empty(t, keys, "the orphan left the index with the table")
	require.Zero(t, orphans)
	sp.home.mu.Lock()
	assert.True(t, sp.cover.Load().retiring.Empty(), "its retired span went with its last orphan")
	assert.Nil(t, sp.orphans, "the map the orphans grew is let go")
	sp.home.mu.Unlock()

	r, err = l.TryLockRange("a", "z", shared)
	require.NoError(t, err)
	b, err = l.Lock(ctx, []byte("b"), shared)
	require.NoError(t, err)
	keys, _ = indexedKeys(sp)
	assert.Equal(t, []string{"b"}, keys, "a key taken again comes back in")
	require.True(t, b.Release())
	require.True(t, r.Release())
}
