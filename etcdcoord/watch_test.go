package etcdcoord_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/etcdcoord"
)

// A delegation that disappears from etcd revokes its admissions at once, live ones too, and the
// node admits from it no more: the next lock of the key makes a new delegation.
func TestVanishedDelegationRevokes(t *testing.T) {
	for name, vanish := range map[string]func(t *testing.T, n *node){
		"deleted": func(t *testing.T, n *node) {
			_, err := n.cli.Delete(context.Background(), "/recordlock/x/", clientv3.WithPrefix())
			require.NoError(t, err)
		},
		"lease revoked": func(t *testing.T, n *node) {
			leases, err := n.cli.Leases(context.Background())
			require.NoError(t, err)
			require.NotEmpty(t, leases.Leases)
			for _, l := range leases.Leases {
				_, err := n.cli.Revoke(context.Background(), l.ID)
				require.NoError(t, err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := startEtcd(t)
			a := newNode(t, e, "a", nodeConfig{faulty: true})
			ctx := context.Background()
			// The lease outlasts the wait below: the revocation, not the lease, must end it.
			ha, err := a.l.Lock(ctx, []byte("k"), cluster(30*time.Second, 10*time.Second))
			require.NoError(t, err)

			vanish(t, a)
			select {
			case <-ha.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("a delegation key that disappears from etcd revokes its local admissions at once, " +
					"but the holder of a vanished delegation was not revoked")
			}
			assert.True(t, ha.IsLeaseExpired())

			h, err := a.l.Lock(ctx, []byte("k"), cluster(time.Second, 10*time.Second))
			require.NoError(t, err)
			assert.Greater(t, h.Token(), ha.Token(), "admitted from a new delegation")
			resp, err := a.cli.Get(ctx, exclusiveKey("k"))
			require.NoError(t, err)
			require.Len(t, resp.Kvs, 1)
			assert.Equal(t, h.Token(), uint64(resp.Kvs[0].ModRevision))
			require.True(t, h.Release())
		})
	}
}

// Waiting for another node uses the node's one watch: hand-offs open no new watch.
func TestHandoffsOpenNoWatch(t *testing.T) {
	e := startEtcd(t)
	nodes := []*node{newNode(t, e, "a", nodeConfig{}), newNode(t, e, "b", nodeConfig{})}
	ctx := context.Background()
	lockRelease := func(n *node, key string) uint64 {
		h, err := n.l.Lock(ctx, []byte(key), cluster(time.Second, 10*time.Second))
		require.NoError(t, err)
		require.True(t, h.Release())
		return h.Token()
	}
	lockRelease(nodes[1], "warm-up") // the watch is established
	last := lockRelease(nodes[0], "k")
	before := []map[string]int{nodes[0].reqs.snapshot(), nodes[1].reqs.snapshot()}
	const handoffs = 10
	for i := range handoffs {
		token := lockRelease(nodes[(i+1)%2], "k")
		require.Greater(t, token, last, "hand-off %d: the key moved to the other node", i)
		last = token
	}
	for i, n := range nodes {
		assert.Zero(t, n.reqs.since(before[i])["/etcdserverpb.Watch/Watch"], "watch requests of %s", n.name)
	}
}

// With the etcd server stopped, the node stops admitting from its delegations at once, not when
// the lease it trusts runs out: the client would retry its watch in place, so the node takes a
// lost connection for a broken watch.
func TestStoppedEtcdStopsAdmissions(t *testing.T) {
	e := startEtcd(t)
	n := newNode(t, e, "a", nodeConfig{opts: []etcdcoord.Option{etcdcoord.WithRequestTimeout(300 * time.Millisecond)}})
	ctx := context.Background()
	h, err := n.l.Lock(ctx, []byte("k"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	require.True(t, h.Release())

	e.stop()
	require.Eventually(t, func() bool { return n.coord.Stats().WatchRestarts > 0 }, 5*time.Second, 5*time.Millisecond,
		"the node did not take the lost connection for a broken watch")
	_, err = n.l.TryLock([]byte("k"), cluster(time.Second, 100*time.Millisecond))
	require.ErrorIs(t, err, recordlock.ErrClusterUnavailable, "the node never admits while its watch is down, but it admitted from a delegation while etcd was down")
}
