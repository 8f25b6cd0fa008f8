package etcdcoord_test

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/etcdcoord"
)

// A wait for another node that runs out while a request is in flight is ErrTimeout: etcd
// answered, the other nodes were slow.
func TestTimeoutDuringColdRequest(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	c := newNode(t, e, "c", nodeConfig{})
	ctx := context.Background()
	ha, err := a.l.Lock(ctx, []byte("k"), cluster(5*time.Second, 10*time.Second))
	require.NoError(t, err)
	gotC := lockAsync(c, "k", cluster(5*time.Second, 20*time.Second)) // outlives B's wait
	waitForKey(t, a.cli, recallKey("k"))                              // C is first in turn

	// B's first cold Txn finds C ahead and waits. When A hands the key to C, B looks again,
	// and that Txn is slower than what is left of B's wait.
	txns := make(chan int, 2)
	n := 0
	b.reqs.setHook(func(ctx context.Context, method string, req any, invoke func() error) error {
		if method != "/etcdserverpb.KV/Txn" || isWithdraw(req) {
			return invoke()
		}
		n++
		if n == 2 {
			<-ctx.Done()
			return ctx.Err()
		}
		err := invoke()
		txns <- n
		return err
	})
	gotB := lockAsync(b, "k", cluster(time.Second, time.Second))
	require.Equal(t, 1, <-txns)
	ha.Release() // whether A still held it is TestRecallWaitsForLiveHolder's business

	rc := <-gotC
	require.NoError(t, rc.err)
	r := <-gotB
	require.ErrorIs(t, r.err, recordlock.ErrTimeout, "a wait for another node that ran out matches ErrTimeout")
	assert.NotErrorIs(t, r.err, recordlock.ErrClusterUnavailable, "etcd answered; it is not unavailable")
	assert.NotErrorIs(t, r.err, context.Canceled)
	require.True(t, rc.h.Release())
}

// A wait that runs out is ErrTimeout whatever request is in flight when it does: errors keep
// their cause. A reader on A holds sku/1 while B's recall of it is pending; a second reader on A
// (the local key admits it) waits for that recall to end, and its Timeout runs out while the cold
// Txn that follows is in flight. etcd answered everything: that lock failed because it waited
// for holders of the key, not because etcd is unavailable.
func TestTimeoutAfterWaitingForOwnRecall(t *testing.T) {
	e := startEtcd(t)
	clock := recordlock.NewManualClock(time.Unix(1, 0))
	waiting := make(chan struct{}, 1)
	a := newNode(t, e, "a", nodeConfig{clock: clock, opts: []etcdcoord.Option{etcdcoord.WithRecallWaitLag(func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	})}})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()

	ha, err := a.l.Lock(ctx, []byte("sku/1"), sharedCluster(3*time.Second, 10*time.Second))
	require.NoError(t, err)
	gotB := lockAsync(b, "sku/1", cluster(time.Second, 30*time.Second))
	require.Eventually(t, func() bool { return a.coord.Stats().RecallsReceived == 1 }, 10*time.Second, time.Millisecond)

	// A's budget of 5 s runs out as A sends the cold Txn that follows the end of its delegation.
	const timeout = 5 * time.Second
	var armed atomic.Bool
	var once sync.Once
	dkey := []byte(exclusiveKey("sku/1"))
	a.reqs.setHook(func(ctx context.Context, method string, req any, invoke func() error) error {
		if txn, ok := req.(*etcdserverpb.TxnRequest); ok && armed.Load() && len(txn.Compare) > 0 &&
			txn.Compare[0].Target == etcdserverpb.Compare_CREATE && bytes.Equal(txn.Compare[0].Key, dkey) {
			once.Do(func() { clock.Advance(timeout) })
		}
		return invoke()
	})
	gotA := make(chan lockResult, 1)
	go func() {
		h, err := a.l.Lock(ctx, []byte("sku/1"), sharedCluster(time.Second, timeout))
		gotA <- lockResult{h, err}
	}()
	select {
	case <-waiting:
	case r := <-gotA:
		t.Fatalf("a recall stops the delegation admitting new local locks, but A's second reader "+
			"did not wait for it: %v", r.err)
	}
	armed.Store(true)
	require.True(t, ha.Release()) // A hands the key over to B

	r := <-gotA
	require.Error(t, r.err)
	assert.ErrorIs(t, r.err, recordlock.ErrTimeout, "a wait that ran out matches ErrTimeout, whatever request was in flight")
	assert.NotErrorIs(t, r.err, recordlock.ErrClusterUnavailable, "etcd answered every request; it is not unavailable")
	rb := <-gotB
	require.NoError(t, rb.err)
	require.True(t, rb.h.Release())
}

// createFamily creates a column family of n's database, destroyed with the test.
func createFamily(t *testing.T, n *node, name string) *grocksdb.ColumnFamilyHandle {
	t.Helper()
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	cf, err := n.db.CreateColumnFamily(opts, name)
	require.NoError(t, err)
	t.Cleanup(cf.Destroy)
	return cf
}

// A lease the node's etcd lease cannot cover is invalid options, not an unavailable cluster,
// and nothing stays locked.
func TestLeaseLongerThanTTLLessSkew(t *testing.T) {
	e := startEtcd(t)
	n := newNode(t, e, "a", nodeConfig{opts: []etcdcoord.Option{etcdcoord.WithTTL(5 * time.Second)}})
	// The node reads its prefix and starts its watch in the background once New returns, and
	// refreshes its etcd lease on its own schedule: neither is a request for the lock.
	require.Eventually(t, func() bool { return n.reqs.snapshot()["/etcdserverpb.Watch/Watch"] > 0 },
		10*time.Second, time.Millisecond, "the node's watch never started")
	before := n.reqs.snapshot()
	_, err := n.l.Lock(context.Background(), []byte("k"), cluster(4500*time.Millisecond, 5*time.Second))
	require.ErrorIs(t, err, recordlock.ErrInvalidOptions, "a Lease longer than TTL less skew matches ErrInvalidOptions")
	sent := n.reqs.since(before)
	delete(sent, "/etcdserverpb.Lease/LeaseKeepAlive")
	assert.Empty(t, sent, "no request for a lease that cannot be granted")
	h, err := n.l.Lock(context.Background(), []byte("k"), cluster(4*time.Second, 5*time.Second))
	require.NoError(t, err, "TTL less skew is the longest lease")
	require.True(t, h.Release())
}

// A node name that is live in the cluster is refused; once its coordinator closes, the name
// is free again.
func TestNewRefusesLiveName(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	other := newNode(t, e, "other", nodeConfig{})
	c, err := etcdcoord.New(other.cli, "a", etcdcoord.WithLogger(quiet))
	require.ErrorIs(t, err, etcdcoord.ErrNameTaken, "a node name already live in the cluster is refused by New")
	assert.Nil(t, c)

	require.NoError(t, a.coord.Close())
	c, err = etcdcoord.New(other.cli, "a", etcdcoord.WithLogger(quiet))
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

// Deleting the prefix deletes the name registrations too, so New lets in a second coordinator
// of a running one's name. The two still tell their recalls apart, by the lease each names, and
// hand the key to each other.
func TestSameNamedCoordinatorsServeEachOthersRecalls(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	_, err := a.cli.Delete(context.Background(), "/recordlock/", clientv3.WithPrefix())
	require.NoError(t, err)
	twin := newNode(t, e, "a", nodeConfig{})
	ctx := context.Background()
	for i, n := range []*node{a, twin, a} {
		h, err := n.l.Lock(ctx, []byte("k"), cluster(time.Second, 3*time.Second))
		require.NoError(t, err, "lock %d: coordinators of one name tell their recalls apart, but the other did not hand the key over", i)
		require.True(t, h.Release())
	}
}
