package recordlock_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

func TestScopeResolution(t *testing.T) {
	type setup func(l *recordlock.Locker, c *testCoord)
	var (
		none     setup = func(*recordlock.Locker, *testCoord) {}
		withC    setup = func(l *recordlock.Locker, c *testCoord) { l.SetCoordinator(c) }
		removed  setup = func(l *recordlock.Locker, c *testCoord) { l.SetCoordinator(c); l.RemoveCoordinator(false) }
		alone    setup = func(l *recordlock.Locker, c *testCoord) { l.SetCoordinator(c); l.RemoveCoordinator(true) }
		setNil   setup = func(l *recordlock.Locker, c *testCoord) { l.SetCoordinator(c); l.SetCoordinator(nil) }
		setAgain setup = func(l *recordlock.Locker, c *testCoord) {
			l.SetCoordinator(c)
			l.RemoveCoordinator(false)
			l.SetCoordinator(c)
		}
	)
	const (
		node    = "node"
		cluster = "cluster"
		closed  = "fails closed"
	)
	cases := []struct {
		name  string
		setup setup
		scope recordlock.Scope
		want  string
	}{
		{"node scope with a coordinator", withC, recordlock.ScopeNode, node},
		{"node scope after removal", removed, recordlock.ScopeNode, node},
		{"cluster scope without a coordinator", none, recordlock.ScopeCluster, closed},
		{"cluster scope with a coordinator", withC, recordlock.ScopeCluster, cluster},
		{"cluster scope after removal", removed, recordlock.ScopeCluster, closed},
		{"cluster scope after standalone removal", alone, recordlock.ScopeCluster, closed},
		{"default scope never had a coordinator", none, recordlock.ScopeDefault, node},
		{"default scope with a coordinator", withC, recordlock.ScopeDefault, cluster},
		{"default scope after removal", removed, recordlock.ScopeDefault, closed},
		{"default scope after SetCoordinator(nil)", setNil, recordlock.ScopeDefault, closed},
		{"default scope after standalone removal", alone, recordlock.ScopeDefault, node},
		{"default scope after removal and a new coordinator", setAgain, recordlock.ScopeDefault, cluster},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := openDB(t)
			clk, l := manual(t, db)
			c := newTestCoord(clk, l.Timestamp)
			tc.setup(l, c)
			opts := recordlock.Options{Scope: tc.scope}
			for _, try := range []bool{false, true} {
				var h *recordlock.Handle
				var err error
				if try {
					h, err = l.TryLock([]byte("k"), opts)
				} else {
					h, err = l.Lock(context.Background(), []byte("k"), opts)
				}
				calls, _ := c.counts()
				switch tc.want {
				case closed:
					require.ErrorIs(t, err, recordlock.ErrClusterUnavailable)
					assert.Nil(t, h)
					assert.Zero(t, calls, "a lock that fails closed asks no coordinator")
					requireFree(t, l, "k")
				case node:
					require.NoError(t, err)
					assert.Equal(t, recordlock.ScopeNode, h.Scope())
					assert.Zero(t, h.Token())
					_, ok := h.ClusterTsR()
					assert.False(t, ok)
					assert.Zero(t, calls, "a node lock asks no coordinator")
					require.True(t, h.Release())
				case cluster:
					require.NoError(t, err)
					assert.Equal(t, recordlock.ScopeCluster, h.Scope())
					assert.NotZero(t, h.Token())
					_, ok := h.ClusterTsR()
					assert.True(t, ok)
					assert.Equal(t, map[bool]int{false: 1, true: 2}[try], calls)
					require.True(t, h.Release())
				}
			}
		})
	}
}

// Coordinators live on the database descriptor: every Locker of the database sees a change made
// through any of them, and a Locker of another database sees none.
func TestCoordinatorIsPerDatabase(t *testing.T) {
	db, other := openDB(t), openDB(t)
	clk, a := manual(t, db)
	b := newLocker(t, db, recordlock.WithClock(clk))
	o := newLocker(t, other, recordlock.WithClock(clk))
	c := newTestCoord(clk, a.Timestamp)
	ctx := context.Background()

	scopeOf := func(l *recordlock.Locker) (recordlock.Scope, error) {
		t.Helper()
		h, err := l.Lock(ctx, []byte("k"), recordlock.Options{})
		if err != nil {
			return 0, err
		}
		require.True(t, h.Release())
		return h.Scope(), nil
	}

	a.SetCoordinator(c)
	s, err := scopeOf(b)
	require.NoError(t, err)
	assert.Equal(t, recordlock.ScopeCluster, s, "SetCoordinator through a is seen by b")
	s, err = scopeOf(o)
	require.NoError(t, err)
	assert.Equal(t, recordlock.ScopeNode, s, "another database is not affected")

	b.RemoveCoordinator(false)
	_, err = scopeOf(a)
	require.ErrorIs(t, err, recordlock.ErrClusterUnavailable, "RemoveCoordinator(false) through b fails a closed")

	a.RemoveCoordinator(true)
	s, err = scopeOf(b)
	require.NoError(t, err)
	assert.Equal(t, recordlock.ScopeNode, s, "RemoveCoordinator(true) through a makes b standalone")

	// WithCoordinator on a new Locker sets it for the Lockers already open.
	newLocker(t, db, recordlock.WithClock(clk), recordlock.WithCoordinator(c))
	s, err = scopeOf(a)
	require.NoError(t, err)
	assert.Equal(t, recordlock.ScopeCluster, s)
	calls, _ := c.counts()
	assert.Equal(t, 2, calls)
}

// A coordinator removed without declaring the database standalone keeps its default-scope locks
// failing closed after every Locker of it closed and a new one opened: the state belongs to the
// database, not to the Lockers' table.
func TestRemovedCoordinatorFailsClosedAcrossReopen(t *testing.T) {
	db := openDB(t)
	clk := recordlock.NewManualClock(epoch)
	l, err := recordlock.New(db, recordlock.WithClock(clk))
	require.NoError(t, err)
	l.SetCoordinator(newTestCoord(clk, l.Timestamp))
	l.RemoveCoordinator(false)
	require.NoError(t, l.Close())

	reopened := newLocker(t, db, recordlock.WithClock(clk))
	_, err = reopened.TryLock([]byte("k"), recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrClusterUnavailable)
	h, err := reopened.TryLock([]byte("k"), recordlock.Options{Scope: recordlock.ScopeNode})
	require.NoError(t, err, "node scope is always local")
	require.True(t, h.Release())

	reopened.RemoveCoordinator(true)
	h, err = reopened.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err, "declared standalone, the database runs node locks again")
	require.True(t, h.Release())
}
