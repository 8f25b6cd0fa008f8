package etcdcoord_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/etcdcoord"
)

// The gRPC methods the coordinator's requests use, as the request counter names them.
const (
	txnMethod       = "/etcdserverpb.KV/Txn"
	keepAliveMethod = "/etcdserverpb.Lease/LeaseKeepAlive"
)

// A lock whose Lease is the longest the node's etcd lease can cover (TTL less skew) is admitted
// at once on every path: cold, repeat and hand-off. Each refreshes the node's lease at most
// once for its admission, since the lease must cover a round measured from before the refresh;
// the hand-off may refresh once more before its recall.
func TestLongestLeaseIsAdmittedOnEveryPath(t *testing.T) {
	e := startEtcd(t)
	ttl := []etcdcoord.Option{etcdcoord.WithTTL(5 * time.Second)} // DefaultSkew: the longest lease is 4 s
	a := newNode(t, e, "a", nodeConfig{opts: ttl})
	b := newNode(t, e, "b", nodeConfig{opts: ttl})
	ctx := context.Background()
	longest := cluster(4*time.Second, 2*time.Second)
	lockCounted := func(n *node, what string) (uint64, map[string]int) {
		t.Helper()
		before := n.reqs.snapshot()
		h, err := n.l.Lock(ctx, []byte("k"), longest)
		require.NoError(t, err, "%s at the longest lease", what)
		sent := n.reqs.since(before)
		require.True(t, h.Release())
		return h.Token(), sent
	}

	for _, n := range []*node{a, b} { // each node's watch is established: its requests are not the lock's
		h, err := n.l.Lock(ctx, []byte("warm-up"), cluster(time.Second, 10*time.Second))
		require.NoError(t, err)
		require.True(t, h.Release())
	}

	coldToken, sent := lockCounted(a, "cold lock")
	assert.Equal(t, 1, sent[txnMethod], "cold lock: the Txn that creates the delegation")
	assert.LessOrEqual(t, sent[keepAliveMethod], 1, "cold lock: lease refreshes")

	repeatToken, sent := lockCounted(a, "repeat lock")
	assert.Equal(t, coldToken, repeatToken, "a repeat lock is admitted from the node's delegation")
	assert.Equal(t, map[string]int{keepAliveMethod: 1}, sent,
		"repeat lock: one refresh, since the round outlasts what the node trusted of its lease")

	handoffToken, sent := lockCounted(b, "hand-off")
	assert.Greater(t, handoffToken, repeatToken, "the key moved to B")
	assert.Equal(t, 1, sent[txnMethod], "hand-off: the Txn that writes the recall")
	assert.LessOrEqual(t, sent[keepAliveMethod], 2, "hand-off: one refresh before the recall, one before admitting")
	delete(sent, txnMethod)
	delete(sent, keepAliveMethod)
	assert.Empty(t, sent, "hand-off: other requests")
}
