package recordlock

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/tempdb"
)

func TestTableDroppedWhenLastLockerCloses(t *testing.T) {
	db := tempdb.New(t)
	clk := NewManualClock(time.Unix(1, 0))
	path := canonicalPath(db.Name())
	registered := func() *table {
		registry.Lock()
		defer registry.Unlock()
		return registry.tables[path]
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

// A lease timer that finds the table inconsistent logs it once per database and never panics.
func TestKeyTableFaultLoggedOnce(t *testing.T) {
	db := tempdb.New(t)
	clk := NewManualClock(time.Unix(1, 0))
	var logs LogCapture
	l, err := New(db, WithClock(clk), WithLogger(slog.New(&logs)))
	require.NoError(t, err)
	defer l.Close()

	for _, key := range []string{"a", "b"} {
		h, err := l.TryLock([]byte(key), Options{Lease: time.Second})
		require.NoError(t, err)
		h.Done() // watched: the lease timer will find the fault
		sh := h.shard()
		sh.mu.Lock()
		h.e.holder = nil // the table lost track of the holder
		sh.mu.Unlock()
	}
	require.NotPanics(t, func() { clk.Advance(time.Second) })
	assert.Len(t, logs.Records(), 1)
}
