package recordlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// Upgrades of cluster-scoped shared locks in a Txn (docs/DESIGN.md §8.5): the cluster half asks
// the coordinator for an exclusive round, the handle switches to it, and a failure leaves the
// share as it was, in the table and in the cluster.

// clusterNodes opens two databases, the nodes "a" and "b" of one cluster, each with a Locker on
// one ManualClock whose coordinator is its node of one testCoord.
func clusterNodes(t *testing.T) (clk *recordlock.ManualClock, c *testCoord, a, b *recordlock.Locker) {
	t.Helper()
	clk, a = manual(t, openDB(t))
	b = newLocker(t, openDB(t), recordlock.WithClock(clk))
	c = newTestCoord(clk, a.Timestamp)
	a.SetCoordinator(c.node("a"))
	b.SetCoordinator(c.node("b"))
	return clk, c, a, b
}

// requireRequest checks what a cluster lock asked the coordinator for.
func requireRequest(t *testing.T, got recordlock.Request, cf, key string, shared bool, lease time.Duration) {
	t.Helper()
	assert.Equal(t, cf, got.ColumnFamily, "the column family's name")
	assert.Equal(t, key, string(got.Key))
	assert.Equal(t, shared, got.Shared, "the mode")
	assert.Equal(t, lease, got.Lease)
	assert.NotNil(t, got.Revoke)
}

// An upgrade of a cluster-scoped share asks the coordinator for an exclusive round of the same
// record for what is left of the lease, and the handle switches to it: its token is the new
// round's, the shared round is given back once, and its lease, AcquiredAt and ClusterTsR stay.
// Another node's reader is then refused until the writer is done.
func TestTxnUpgradeOfClusterShareTakesExclusiveRound(t *testing.T) {
	clk, c, a, b := clusterNodes(t)
	ctx := context.Background()
	key := []byte("k")
	txn := a.Begin()
	defer txn.Rollback()
	h, err := txn.Lock(ctx, key, recordlock.Options{Shared: true, Lease: 10 * time.Second})
	require.NoError(t, err)
	require.Equal(t, recordlock.ScopeCluster, h.Scope())
	sharedTok := h.Token()
	acquired, expires := h.AcquiredAt(), h.ExpiresAt()
	tsR, _ := h.ClusterTsR()

	clk.Advance(3 * time.Second)
	up, err := txn.Lock(ctx, key, recordlock.Options{Timeout: time.Minute})
	require.NoError(t, err)
	assert.Same(t, h, up)
	assert.False(t, h.Shared())
	requireRequest(t, c.lastRequest(t), "default", "k", false, 7*time.Second)
	assert.Greater(t, h.Token(), sharedTok, "the token is the exclusive round's")
	assert.Equal(t, []liveRound{{node: "a", token: h.Token()}}, c.liveOf("default", "k"),
		"the exclusive round is the record's one live round")
	assert.Equal(t, 1, c.releasesOf("k", sharedTok), "the shared round was given back once")
	assert.Equal(t, acquired, h.AcquiredAt())
	gotTsR, _ := h.ClusterTsR()
	assert.Equal(t, tsR, gotTsR)
	assert.Equal(t, expires, h.ExpiresAt(), "the lease did not get longer")

	_, err = b.Lock(ctx, key, recordlock.Options{Shared: true, Timeout: time.Second})
	require.ErrorIs(t, err, recordlock.ErrClusterUnavailable, "another node's reader is refused")
	requireFree(t, b, "k")
	require.NoError(t, txn.Put(key, []byte("v")))
	require.NoError(t, txn.Commit())
	assert.Equal(t, 1, c.releasesOf("k", up.Token()), "the exclusive round ends with the lock")
	r, err := b.Lock(ctx, key, recordlock.Options{Shared: true, Timeout: time.Second})
	require.NoError(t, err, "the reader is admitted once the writer is done")
	require.True(t, r.Release())
	assert.Empty(t, c.liveOf("default", "k"))
	assert.True(t, recordlock.ProbeTableEmpty(a))
}

// The exclusive round never makes the lease longer: a round minted while the request ran ends
// after the lease and leaves the deadline where it was; a round minted before the request (as a
// delegation the node already held may be) ends before it and moves the deadline earlier.
func TestClusterUpgradeKeepsTheLease(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mint    func(clk *recordlock.ManualClock, c *testCoord) // arranges when the round is minted
		shorter time.Duration                                   // how much earlier the lease ends
	}{
		{"minted during the request", func(clk *recordlock.ManualClock, c *testCoord) {
			c.gate, c.entered = make(chan struct{}), make(chan context.Context, 1)
			go func() {
				<-c.entered
				clk.Advance(time.Second)
				close(c.gate)
			}()
		}, 0},
		{"minted before the request", func(_ *recordlock.ManualClock, c *testCoord) {
			c.mintedBefore = 2 * time.Second
		}, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk, c, a, _ := clusterNodes(t)
			ctx := context.Background()
			key := []byte("k")
			txn := a.Begin()
			defer txn.Rollback()
			start := clk.Mono()
			h, err := txn.Lock(ctx, key, recordlock.Options{Shared: true, Lease: 10 * time.Second})
			require.NoError(t, err)
			sharedTok, expires := h.Token(), h.ExpiresAt()
			clk.Advance(3 * time.Second)

			tc.mint(clk, c)
			_, err = txn.Lock(ctx, key, recordlock.Options{Timeout: time.Minute})
			require.NoError(t, err)
			require.False(t, h.Shared())
			assert.Equal(t, expires.Add(-tc.shorter), h.ExpiresAt())
			end := start + 10*time.Second - tc.shorter
			clk.Advance(end - clk.Mono() - time.Millisecond)
			assert.False(t, h.IsLeaseExpired(), "live until the deadline")
			clk.Advance(time.Millisecond)
			assert.True(t, h.IsLeaseExpired(), "over at the deadline")
			assert.Equal(t, 1, c.releasesOf("k", sharedTok))
			assert.Equal(t, 1, c.releasesOf("k", h.Token()), "the lapse gave the exclusive round back")
		})
	}
}

// An upgrade whose cluster half fails leaves the handle shared and unchanged: its token, its
// shared round (still live, not given back), its lease, and its share of the local key, which
// another reader of the same Locker can join. The error is a cluster lock's. Once the cluster
// grants, the same handle upgrades.
func TestTxnFailedClusterUpgradeKeepsShare(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(t *testing.T, clk *recordlock.ManualClock, c *testCoord, a, b *recordlock.Locker) (undo func())
		want error
	}{
		{"coordinator error", func(_ *testing.T, _ *recordlock.ManualClock, c *testCoord, _, _ *recordlock.Locker) func() {
			c.err = errors.New("etcd is down")
			return func() { c.err = nil }
		}, recordlock.ErrClusterUnavailable},
		{"held shared on another node", func(t *testing.T, _ *recordlock.ManualClock, _ *testCoord, _, b *recordlock.Locker) func() {
			o, err := b.Lock(context.Background(), []byte("k"), recordlock.Options{Shared: true})
			require.NoError(t, err)
			return func() { require.True(t, o.Release()) }
		}, recordlock.ErrClusterUnavailable},
		{"the wait runs out", func(_ *testing.T, clk *recordlock.ManualClock, c *testCoord, _, _ *recordlock.Locker) func() {
			c.gate, c.entered = make(chan struct{}), make(chan context.Context, 1)
			go func() {
				<-c.entered
				clk.Advance(time.Minute)
			}()
			return func() { c.gate, c.entered = nil, nil }
		}, recordlock.ErrTimeout},
		{"no coordinator", func(_ *testing.T, _ *recordlock.ManualClock, c *testCoord, a, _ *recordlock.Locker) func() {
			a.RemoveCoordinator(false)
			return func() { a.SetCoordinator(c.node("a")) }
		}, recordlock.ErrClusterUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk, c, a, b := clusterNodes(t)
			ctx := context.Background()
			key := []byte("k")
			txn := a.Begin()
			defer txn.Rollback()
			h, err := txn.Lock(ctx, key, recordlock.Options{Shared: true, Lease: 4 * time.Minute})
			require.NoError(t, err)
			sharedTok, acquired, expires := h.Token(), h.AcquiredAt(), h.ExpiresAt()

			undo := tc.fail(t, clk, c, a, b)
			_, err = txn.Lock(ctx, key, recordlock.Options{Timeout: time.Minute})
			require.ErrorIs(t, err, tc.want)
			undo()
			assert.True(t, h.Shared(), "still shared")
			assert.False(t, h.IsExpired())
			assert.Equal(t, sharedTok, h.Token(), "with its token")
			assert.Equal(t, acquired, h.AcquiredAt())
			assert.Equal(t, expires, h.ExpiresAt())
			assert.Equal(t, 0, c.releasesOf("k", sharedTok), "its shared round was not given back")
			assert.Contains(t, c.liveOf("default", "k"), liveRound{node: "a", shared: true, token: sharedTok})
			for _, r := range c.liveOf("default", "k") {
				assert.True(t, r.shared, "no exclusive round of the record is live: %+v", r)
			}
			s, err := a.TryLock(key, recordlock.Options{Shared: true, Scope: recordlock.ScopeNode})
			require.NoError(t, err, "the local key is held shared again")
			require.True(t, s.Release())
			require.ErrorIs(t, txn.Put(key, []byte("v")), recordlock.ErrNotLocked)

			_, err = txn.Lock(ctx, key, recordlock.Options{Timeout: time.Minute})
			require.NoError(t, err, "the upgrade succeeds once the cluster grants it")
			assert.False(t, h.Shared())
			assert.Equal(t, 1, c.releasesOf("k", sharedTok))
			require.NoError(t, txn.Put(key, []byte("v")))
			require.NoError(t, txn.Commit())
			assert.Empty(t, c.liveOf("default", "k"))
		})
	}
}

// A ctx cancelled while the cluster is asked fails the upgrade with the ctx's error, and the
// handle is still shared with its round.
func TestTxnClusterUpgradeCancelled(t *testing.T) {
	_, c, a, _ := clusterNodes(t)
	key := []byte("k")
	txn := a.Begin()
	t.Cleanup(txn.Rollback)
	h, err := txn.Lock(context.Background(), key, recordlock.Options{Shared: true})
	require.NoError(t, err)
	sharedTok := h.Token()
	c.gate, c.entered = make(chan struct{}), make(chan context.Context, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	up := txnLockCtxAsync(t, ctx, txn, key, recordlock.Options{Timeout: time.Minute})
	testutil.Await(t, c.entered, "the exclusive request")
	cancel()
	require.ErrorIs(t, testutil.Await(t, up, "the upgrade").err, context.Canceled)
	assert.True(t, h.Shared())
	assert.Equal(t, sharedTok, h.Token())
	assert.Equal(t, []liveRound{{node: "a", shared: true, token: sharedTok}}, c.liveOf("default", "k"))
	s, err := a.TryLock(key, recordlock.Options{Shared: true, Scope: recordlock.ScopeNode})
	require.NoError(t, err, "the local key is held shared again")
	require.True(t, s.Release())
}

// If the share ends while its exclusive round is asked for (its lease lapses, or the cluster
// recalls it), the upgrade fails with ErrLeaseExpired, and both rounds are given back once: the
// shared one by the lapse, the exclusive one granted too late by the upgrade.
func TestClusterUpgradeFailsWhenShareEnds(t *testing.T) {
	for _, how := range []string{"lapse", "recall"} {
		t.Run(how, func(t *testing.T) {
			clk, c, a, _ := clusterNodes(t)
			key := []byte("k")
			txn := a.Begin()
			t.Cleanup(txn.Rollback)
			h, err := txn.Lock(context.Background(), key, recordlock.Options{Shared: true, Lease: 2 * time.Second})
			require.NoError(t, err)
			sharedTok := h.Token()
			c.gate, c.entered = make(chan struct{}), make(chan context.Context, 1)
			up := txnLockAsync(t, txn, key, recordlock.Options{Timeout: time.Minute})
			testutil.Await(t, c.entered, "the exclusive request")
			if how == "lapse" {
				clk.Advance(2 * time.Second)
			} else {
				c.recall("k")
			}
			require.True(t, h.IsLeaseExpired())
			close(c.gate)
			require.ErrorIs(t, testutil.Await(t, up, "the upgrade").err, recordlock.ErrLeaseExpired)
			assert.Equal(t, 1, c.releasesOf("k", sharedTok), "the shared round")
			assert.Equal(t, 1, c.releasesOf("k", sharedTok+1), "the exclusive round")
			assert.Empty(t, c.liveOf("default", "k"))
			requireFree(t, a, "k")
		})
	}
}

// LockAll upgrades the cluster-scoped shares of the Txn with exclusive rounds, in key order with
// the keys it takes, and gives the shared rounds back only once it succeeds: when it fails, each
// upgraded handle gets its shared round back, its exclusive round is given back, and its share
// of the local key is as before.
func TestTxnLockAllClusterUpgrade(t *testing.T) {
	t.Run("success", func(t *testing.T) {
		_, c, a, b := clusterNodes(t)
		ctx := context.Background()
		txn := a.Begin()
		defer txn.Rollback()
		ha, err := txn.Lock(ctx, []byte("a"), recordlock.Options{Shared: true})
		require.NoError(t, err)
		hc, err := txn.Lock(ctx, []byte("c"), recordlock.Options{Shared: true})
		require.NoError(t, err)
		tokA, tokC := ha.Token(), hc.Token()
		var releasedDuring []int // the shared rounds' releases while c's exclusive round is asked
		c.during = func() {
			if string(c.lastRequest(t).Key) == "c" {
				releasedDuring = []int{c.releasesOf("a", tokA), c.releasesOf("c", tokC)}
			}
		}
		hs, err := txn.LockAll(ctx, recordlock.Options{Timeout: time.Minute}, []byte("c"), []byte("b"), []byte("a"))
		require.NoError(t, err)
		c.during = nil
		assert.Same(t, hc, hs[0])
		assert.Same(t, ha, hs[2])
		assert.Equal(t, []int{0, 0}, releasedDuring, "the shared rounds are kept until the call succeeds")
		c.mu.Lock()
		reqs := c.requests[2:]
		c.mu.Unlock()
		require.Len(t, reqs, 3)
		for i, k := range []string{"a", "b", "c"} {
			requireRequest(t, reqs[i], "default", k, false, recordlock.DefaultLease)
		}
		for _, h := range hs {
			assert.False(t, h.Shared())
		}
		assert.Equal(t, tokA+1, ha.Token())
		assert.Equal(t, tokC+1, hc.Token())
		assert.Equal(t, 1, c.releasesOf("a", tokA))
		assert.Equal(t, 1, c.releasesOf("c", tokC))
		_, err = b.Lock(ctx, []byte("a"), recordlock.Options{Shared: true, Timeout: time.Second})
		require.ErrorIs(t, err, recordlock.ErrClusterUnavailable, "another node's reader is refused")
		require.NoError(t, txn.Commit())
		assert.Empty(t, c.liveOf("default", "a"))
		assert.Empty(t, c.liveOf("default", "c"))
	})

	t.Run("failure", func(t *testing.T) {
		clk, c, a, b := clusterNodes(t)
		ctx := context.Background()
		ob, err := b.Lock(ctx, []byte("b"), recordlock.Options{}) // b's round will be refused
		require.NoError(t, err)
		defer ob.Release()
		txn := a.Begin()
		defer txn.Rollback()
		ha, err := txn.Lock(ctx, []byte("a"), recordlock.Options{Shared: true})
		require.NoError(t, err)
		tokA, expires := ha.Token(), ha.ExpiresAt()
		c.mintedBefore = time.Second // a's exclusive round ends before its lease: the lease with it

		_, err = txn.LockAll(ctx, recordlock.Options{Timeout: time.Minute}, []byte("a"), []byte("b"))
		require.ErrorIs(t, err, recordlock.ErrClusterUnavailable)
		requireRequest(t, c.lastRequest(t), "default", "b", false, recordlock.DefaultLease)
		assert.True(t, ha.Shared(), "a's upgrade was undone")
		assert.False(t, ha.IsExpired())
		assert.Equal(t, tokA, ha.Token(), "with its shared round's token")
		assert.Equal(t, expires, ha.ExpiresAt())
		assert.Equal(t, 0, c.releasesOf("a", tokA), "its shared round was kept")
		assert.Equal(t, 1, c.releasesOf("a", tokA+1), "its exclusive round was given back")
		assert.Equal(t, []liveRound{{node: "a", shared: true, token: tokA}}, c.liveOf("default", "a"))
		s, err := a.TryLock([]byte("a"), recordlock.Options{Shared: true, Scope: recordlock.ScopeNode})
		require.NoError(t, err, "the local key is held shared again")
		require.True(t, s.Release())
		requireFree(t, a, "b")
		r, err := b.Lock(ctx, []byte("a"), recordlock.Options{Shared: true, Timeout: time.Second})
		require.NoError(t, err, "another node's reader joins the share")
		require.True(t, r.Release())
		clk.Advance(recordlock.DefaultLease - time.Millisecond)
		assert.False(t, ha.IsLeaseExpired(), "the lease ends where it did before the call")
		txn.Rollback()
		assert.Equal(t, 1, c.releasesOf("a", tokA))
		assert.True(t, recordlock.ProbeTableEmpty(a))
	})

	// An upgraded share whose lease ends while the call waits for a later key fails the call;
	// its exclusive round is given back by the lapse, and its shared round by the undo.
	t.Run("a share that ends meanwhile", func(t *testing.T) {
		clk, c, a, _ := clusterNodes(t)
		ctx := context.Background()
		hb, err := a.Lock(ctx, []byte("b"), recordlock.Options{Scope: recordlock.ScopeNode})
		require.NoError(t, err)
		txn := a.Begin()
		t.Cleanup(txn.Rollback)
		ha, err := txn.Lock(ctx, []byte("a"), recordlock.Options{Shared: true, Lease: 2 * time.Second})
		require.NoError(t, err)
		tokA := ha.Token()

		res := lockAllAsync(t, ctx, txn, recordlock.Options{Timeout: time.Minute}, []byte("a"), []byte("b"))
		waitQueued(t, a, []byte("b"), 1)
		require.False(t, ha.Shared(), "a was upgraded before b was waited for")
		clk.Advance(2 * time.Second)
		require.True(t, ha.IsLeaseExpired())
		assert.Equal(t, 1, c.releasesOf("a", tokA+1), "the lapse gave the exclusive round back")
		require.True(t, hb.Release())
		require.ErrorIs(t, testutil.Await(t, res, "LockAll").err, recordlock.ErrLeaseExpired)
		assert.Equal(t, 1, c.releasesOf("a", tokA), "the undo gave the shared round back")
		assert.Equal(t, 1, c.releasesOf("a", tokA+1))
		assert.Empty(t, c.liveOf("default", "a"))
		assert.Empty(t, c.liveOf("default", "b"), "the round of the key LockAll took was given back")
		requireFree(t, a, "a")
		requireFree(t, a, "b")
	})
}

// A share joined by hand to a round of the caller's own (JoinClusterRound) reports ScopeCluster,
// but its round is not the coordinator's: a Txn's upgrade of it is the table's alone, asks no
// coordinator (with none configured, or with one), and keeps the caller's round and release hook.
func TestTxnUpgradeOfShareJoinedByHandAsksNoCoordinator(t *testing.T) {
	for _, withCoord := range []bool{false, true} {
		name := "no coordinator"
		if withCoord {
			name = "coordinator"
		}
		t.Run(name, func(t *testing.T) {
			clk, l := manual(t, openDB(t))
			var c *testCoord
			if withCoord {
				c = newTestCoord(clk, l.Timestamp)
				l.SetCoordinator(c.node("a"))
			}
			ctx := context.Background()
			key := []byte("k")
			txn := l.Begin()
			defer txn.Rollback()
			h, err := txn.Lock(ctx, key, recordlock.Options{Shared: true, Scope: recordlock.ScopeNode, Lease: 10 * time.Second})
			require.NoError(t, err)
			hooks := 0
			require.True(t, h.JoinClusterRound(l.Timestamp(), 10*time.Second, clk.Mono(), func() error { hooks++; return nil }))
			require.Equal(t, recordlock.ScopeCluster, h.Scope())

			up, err := txn.Lock(ctx, key, recordlock.Options{Scope: recordlock.ScopeNode, Timeout: time.Second})
			require.NoError(t, err, "the upgrade of a share joined by hand")
			assert.Same(t, h, up)
			assert.False(t, h.Shared())
			if withCoord {
				calls, _ := c.counts()
				assert.Zero(t, calls, "the upgrade asked the coordinator")
			}
			assert.Zero(t, hooks, "the upgrade ran the caller's release hook")
			require.True(t, h.Release())
			assert.Equal(t, 1, hooks, "the caller's round is released with the handle, once")
		})
	}
}
