package etcdcoord_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/etcdcoord"
)

// A node changes a delegation key in etcd only while it is still the one granted to it: every
// Txn that hands a key back compares the key's revision with the node's token. A's
// delegation of k is deleted by an operator while A's watch is held, so A does not know; B then
// locks k and holds it. When A hands back its idle delegation of k, its Txn must leave B's alone.
func TestHandBackLeavesAnotherNodesDelegation(t *testing.T) {
	e := startEtcd(t)
	b := newNode(t, e, "b", nodeConfig{}) // first: A's watch sees no registration
	clock := recordlock.NewManualClock(time.Unix(1, 0))
	gate := newWatchGate()
	a := newNode(t, e, "a", nodeConfig{clock: clock, faulty: true, opts: []etcdcoord.Option{
		etcdcoord.WithLinger(time.Second), etcdcoord.WithWatchLag(gate.lag)}})
	t.Cleanup(gate.release) // before A closes: Close waits for the watch
	ctx := context.Background()
	dkey := exclusiveKey("k")

	ha, err := a.l.Lock(ctx, []byte("k"), cluster(500*time.Millisecond, 10*time.Second))
	require.NoError(t, err)
	require.True(t, ha.Release())
	_, err = a.cli.Delete(ctx, dkey) // A's watch is held before it can report this
	require.NoError(t, err)
	hb, err := b.l.Lock(ctx, []byte("k"), cluster(30*time.Second, 10*time.Second))
	require.NoError(t, err)
	require.Greater(t, hb.Token(), ha.Token())

	clock.Advance(2 * time.Second)                                                       // A's delegation of k lingered idle
	hz, err := a.l.Lock(ctx, []byte("z"), cluster(500*time.Millisecond, 10*time.Second)) // sweeps k
	require.NoError(t, err)
	require.True(t, hz.Release())
	require.Eventually(t, func() bool { return a.coord.Stats().HandBacks == 1 }, 10*time.Second, time.Millisecond,
		"A did not hand the idle key back")

	resp, err := b.cli.Get(ctx, dkey)
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1, "a hand-back compares the delegation's revision, but A's deleted B's delegation")
	assert.Equal(t, hb.Token(), uint64(resp.Kvs[0].ModRevision))
	assert.False(t, hb.IsLeaseExpired(), "B's holder was revoked")
	require.True(t, hb.Release())
}
