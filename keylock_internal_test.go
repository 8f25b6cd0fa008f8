package recordlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/locktable"
	"github.com/recordlock/recordlock/internal/tempdb"
)

// Every Locker of a database shares its table, which the last Close drops from the registry.
func TestTableDroppedWhenLastLockerCloses(t *testing.T) {
	db := tempdb.New(t)
	clk := NewManualClock(time.Unix(1, 0))
	path := canonicalPath(db.Name())
	registered := func() *locktable.Table {
		registry.Lock()
		defer registry.Unlock()
		if t := registry.tables[path]; t != nil {
			return t.tab
		}
		return nil
	}
	a, err := New(db, WithClock(clk))
	require.NoError(t, err)
	b, err := New(db)
	require.NoError(t, err)
	require.Same(t, a.tab, b.tab, "Lockers of one database share a table")
	require.Same(t, a.tab, registered())

	h, err := a.TryLock([]byte("k"), Options{})
	require.NoError(t, err)
	require.NoError(t, a.Close())
	assert.Same(t, b.tab, registered(), "the table stays while a Locker uses it")
	assert.True(t, h.IsExpired())
	require.NoError(t, b.Close())
	assert.Nil(t, registered(), "the last Close drops the table")

	c, err := New(db, WithClock(clk))
	require.NoError(t, err)
	assert.NotSame(t, a.tab, c.tab)
	require.NoError(t, c.Close())
	assert.Nil(t, registered())
}
