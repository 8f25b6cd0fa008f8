package etcdcoord_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The steps of the shared hot path: three nodes read one record, each first cold (one Txn that
// creates its shared delegation, recalling nobody), then 50 repeat readers per node, the nodes
// in turn, each admitted from its node's shared delegation with no etcd request and no recall.
func TestSharedRepeatLocksCostNoRequest(t *testing.T) {
	e := startEtcd(t)
	nodes := []*node{newNode(t, e, "a", nodeConfig{}), newNode(t, e, "b", nodeConfig{}), newNode(t, e, "c", nodeConfig{})}
	ctx := context.Background()
	opts := sharedCluster(10*time.Second, 5*time.Second)

	for _, n := range nodes {
		// A cluster Lock waits for the node's watch, whose first read of the prefix counts as a
		// request: lock another record first, so that the read is done before counting.
		h, err := n.l.Lock(ctx, []byte("warm-up"), opts)
		require.NoError(t, err)
		require.True(t, h.Release())
	}
	for _, n := range nodes {
		before := n.coord.Stats().Requests
		h, err := n.l.Lock(ctx, []byte("k"), opts)
		require.NoError(t, err, "%s: the cold reader", n.name)
		require.True(t, h.Release())
		assert.Equal(t, uint64(1), n.coord.Stats().Requests-before, "%s: a cold reader of a record held only shared costs one Txn", n.name)
	}
	before := make([]uint64, len(nodes))
	for i, n := range nodes {
		before[i] = n.coord.Stats().Requests
	}
	for range 50 {
		for _, n := range nodes {
			h, err := n.l.Lock(ctx, []byte("k"), opts)
			require.NoError(t, err, "%s: a repeat reader", n.name)
			require.True(t, h.Release())
		}
	}
	for i, n := range nodes {
		s := n.coord.Stats()
		assert.Equal(t, before[i], s.Requests, "%s: repeat readers made etcd requests", n.name)
		assert.Zero(t, s.RecallsSent, "%s: a reader recalled a reader", n.name)
		assert.Zero(t, s.RecallsReceived, "%s: a reader was recalled by a reader", n.name)
		assert.Zero(t, s.HandBacks, "%s: a shared delegation was handed back", n.name)
		assert.Equal(t, 2, s.Delegations, "%s: the node's shared delegations of warm-up and k", n.name)
	}
}
