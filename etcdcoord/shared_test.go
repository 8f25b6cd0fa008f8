package etcdcoord_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// sharedCluster are the options of a cluster-scoped shared lock.
func sharedCluster(lease, timeout time.Duration) recordlock.Options {
	opts := cluster(lease, timeout)
	opts.Shared = true
	return opts
}

// A shared lock with cluster scope is shared among the handles of one node and exclusive
// between nodes: two readers on A hold the key at once, from A's one delegation; a reader on B
// asks for the key back and waits while either of A's readers holds it, and A admits no new
// reader meanwhile, so readers on the two nodes take turns. B gets the key, shared, once both of
// A's readers have released it.
func TestSharedReadersShareWithinANode(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()

	r1, err := a.l.Lock(ctx, []byte("k"), sharedCluster(10*time.Second, 10*time.Second))
	require.NoError(t, err)
	r2, err := a.l.Lock(ctx, []byte("k"), sharedCluster(10*time.Second, 10*time.Second))
	require.NoError(t, err, "a second reader on the same node while the first holds the key")
	assert.True(t, r1.Shared())
	assert.True(t, r2.Shared())
	assert.Equal(t, r1.Token(), r2.Token(), "both readers are admitted from A's one delegation")
	var holders []recordlock.LockInfo
	for info := range a.l.Locks() {
		holders = append(holders, info)
	}
	require.Len(t, holders, 2, "A's readers hold the key at once")
	for _, h := range holders {
		assert.True(t, h.Shared)
		assert.Equal(t, recordlock.ScopeCluster, h.Scope)
	}

	got := lockAsync(b, "k", sharedCluster(10*time.Second, 20*time.Second))
	waitForKey(t, a.cli, "/recordlock/r/"+encode("k")) // B has asked for the key back
	time.Sleep(300 * time.Millisecond)                 // A's readers are reading; room for a wrong hand-off
	assert.False(t, admitted(got), "B's reader was admitted while A's readers held the key")
	assert.False(t, r1.IsLeaseExpired(), "the recall revoked a live reader")
	assert.False(t, r2.IsLeaseExpired(), "the recall revoked a live reader")
	// A TryLock does not wait for the local key, but waits for the cluster within its Timeout.
	_, err = a.l.TryLock([]byte("k"), sharedCluster(10*time.Second, 300*time.Millisecond))
	require.ErrorIs(t, err, recordlock.ErrTimeout, "a new reader on A while B waits for the key")
	require.ErrorIs(t, err, recordlock.ErrLocked)
	require.NoError(t, r1.Fence(func() error { return nil }), "a fenced read on A while B waits")

	require.True(t, r1.Release())
	time.Sleep(300 * time.Millisecond) // room for a hand-off with one reader left
	assert.False(t, admitted(got), "B's reader was admitted while one of A's readers held the key")
	require.NoError(t, r2.Fence(func() error { return nil }))
	require.True(t, r2.Release())

	r := <-got
	require.NoError(t, r.err, "B's reader once both of A's have released the key")
	assert.True(t, r.h.Shared())
	assert.Greater(t, r.h.Token(), r2.Token(), "the key moved to B in a later round")
	require.True(t, r.h.Release())
}
