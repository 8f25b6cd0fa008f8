package etcdcoord_test

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/etcdcoord"
)

// What a delegation keeps for revocation is bounded per key, and keeping to the bound never
// makes a lock wait for another handle: the released admission let go is revoked off
// the lock's path, and a hand-back of the key, Close's included, still waits for that
// revocation and the Fence it waits for.

// fencing is a released handle of n whose Fence runs a commit that returns once finish is
// called, evicted by the locks that followed it: its revocation waits for that commit.
type fencing struct {
	h      *recordlock.Handle
	fenced chan error
	finish func()
}

// evictWhileFencing locks and releases key on n, runs Fence on the released handle, and then
// locks and releases key until the first handle is let go to keep to RetainedPerKey. The last
// of those locks, the one that lets it go, is made by evict (with RetainedPerKey released
// admissions kept); it returns once evict has.
func evictWhileFencing(t *testing.T, n *node, key string, evict func(f *fencing)) *fencing {
	t.Helper()
	ctx := context.Background()
	opts := cluster(10*time.Second, 10*time.Second)
	h, err := n.l.Lock(ctx, []byte(key), opts)
	require.NoError(t, err)
	require.True(t, h.Release())
	finish := make(chan struct{})
	f := &fencing{h: h, fenced: make(chan error, 1), finish: sync.OnceFunc(func() { close(finish) })}
	t.Cleanup(f.finish) // lets Close's revocations through should the test stop early
	entered := make(chan struct{})
	go func() { f.fenced <- h.Fence(func() error { close(entered); <-finish; return nil }) }()
	<-entered
	for range etcdcoord.RetainedPerKey - 1 {
		h, err := n.l.Lock(ctx, []byte(key), opts)
		require.NoError(t, err)
		require.True(t, h.Release())
	}
	require.False(t, f.h.IsLeaseExpired(), "the fencing handle was revoked before the bound was reached")
	evict(f)
	return f
}

// lockAndRelease is an evict of evictWhileFencing that locks key on n and releases it.
func lockAndRelease(t *testing.T, n *node, key string) func(*fencing) {
	return func(*fencing) {
		h, err := n.l.Lock(context.Background(), []byte(key), cluster(10*time.Second, 10*time.Second))
		require.NoError(t, err)
		require.True(t, h.Release())
	}
}

// A TryLock of a key free everywhere, whose admission lets go of a released admission that runs
// a Fence, is granted within its own 100 ms Timeout while that commit still runs; the bound
// holds meanwhile, and the evicted admission is revoked once its commit returns.
func TestEvictionDoesNotWaitForFence(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	const valve = 5 * time.Second // ends the commit should the TryLock wait for it
	var h *recordlock.Handle
	var err error
	var valveOpened atomic.Bool // the commit could end only so before TryLock returned
	var waited, revokedDuringCommit bool
	f := evictWhileFencing(t, a, "k", func(f *fencing) {
		tried := make(chan struct{})
		go func() {
			select {
			case <-tried:
			case <-time.After(valve):
				valveOpened.Store(true)
			}
			f.finish()
		}()
		h, err = a.l.TryLock([]byte("k"), cluster(time.Second, 100*time.Millisecond))
		waited = valveOpened.Load()
		revokedDuringCommit = f.h.IsLeaseExpired() // read before the commit may end
		close(tried)
	})
	require.False(t, waited, "keeping to the retention bound made a TryLock wait for another handle's running fence")
	require.NoError(t, err, "a lock that keeps to the retention bound is bounded by its own Timeout alone")
	assert.False(t, revokedDuringCommit, "the evicted admission's revocation returned before its commit")
	require.True(t, h.Release())
	assert.LessOrEqual(t, a.coord.Stats().Retained, etcdcoord.RetainedPerKey,
		"what a delegation retains for fencing is bounded per key (RetainedPerKey released admissions)")

	f.finish()
	require.NoError(t, <-f.fenced)
	// Well before the 10 s lease ends: the revocation, not the lease, ends it.
	require.Eventually(t, f.h.IsLeaseExpired, 3*time.Second, time.Millisecond,
		"an admission let go to keep the bound is revoked once its fence returns")
}

// A recall of a key whose evicted admission still runs a Fence is not handed over until that
// commit returns: B, asking meanwhile, times out, and A sends no hand-back while it runs.
func TestHandBackWaitsForEvictedFence(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	f := evictWhileFencing(t, a, "k", lockAndRelease(t, a, "k"))
	handedBack := watchHandBacks(t, a, "k")

	// B's wait ends with its Timeout, or as soon as A hands the key back while the commit runs.
	r := lockUntil(b, "k", cluster(time.Second, 2*time.Second), handedBack)
	select {
	case <-handedBack:
		t.Fatal("a hand-back went on while an admission let go to keep the bound still ran its Fence")
	default:
	}
	require.ErrorIs(t, r.err, recordlock.ErrTimeout, "B was admitted while A's evicted admission ran its Fence")

	f.finish()
	require.NoError(t, <-f.fenced, "the fence began before the recall, so its write stands")
	h, err := b.l.Lock(context.Background(), []byte("k"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	assert.True(t, f.h.IsLeaseExpired())
	require.True(t, h.Release())
}

// Close hands every key back by revoking the node's etcd lease only once the revocations of
// admissions let go to keep the bound have returned, with the Fence they wait for.
func TestCloseWaitsForEvictedFence(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	f := evictWhileFencing(t, a, "k", lockAndRelease(t, a, "k"))
	closed := make(chan error, 1)
	go func() { closed <- a.coord.Close() }()
	require.Eventually(t, func() bool { return etcdcoord.Closed(a.coord) }, 10*time.Second, time.Millisecond)

	r := lockUntil(b, "k", cluster(time.Second, 2*time.Second), nil)
	if r.err == nil {
		require.True(t, r.h.Release())
		t.Fatal("Close handed the key back while an admission let go to keep the bound still ran its Fence")
	}
	require.ErrorIs(t, r.err, recordlock.ErrTimeout)
	select {
	case <-closed:
		t.Fatal("Close returned while an evicted admission's Fence ran")
	default:
	}

	f.finish()
	require.NoError(t, <-f.fenced)
	require.NoError(t, <-closed)
	h, err := b.l.Lock(context.Background(), []byte("k"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	require.True(t, h.Release())
}

// lockUntil locks key on n and returns its result, or, if stop closes first, a result whose
// err is not nil; a lock that returns later is released.
func lockUntil(n *node, key string, opts recordlock.Options, stop <-chan struct{}) lockResult {
	got := lockAsync(n, key, opts)
	select {
	case r := <-got:
		return r
	case <-stop:
		go func() {
			if r := <-got; r.h != nil {
				r.h.Release()
			}
		}()
		return lockResult{err: context.Canceled}
	}
}

// watchHandBacks returns a channel closed when n sends a Txn that deletes or hands over its
// delegation of key: one that compares the key's mod revision, at the top or nested.
func watchHandBacks(t *testing.T, n *node, key string) <-chan struct{} {
	dkey := []byte(exclusiveKey(key))
	sent := make(chan struct{})
	once := sync.OnceFunc(func() { close(sent) })
	n.reqs.setHook(func(ctx context.Context, method string, req any, invoke func() error) error {
		if txn, ok := req.(*etcdserverpb.TxnRequest); ok && method == txnMethod && comparesModOf(txn, dkey) {
			once()
		}
		return invoke()
	})
	t.Cleanup(func() { n.reqs.setHook(nil) })
	return sent
}

func comparesModOf(txn *etcdserverpb.TxnRequest, key []byte) bool {
	for _, c := range txn.Compare {
		if c.Target == etcdserverpb.Compare_MOD && bytes.Equal(c.Key, key) {
			return true
		}
	}
	for _, ops := range [][]*etcdserverpb.RequestOp{txn.Success, txn.Failure} {
		for _, op := range ops {
			if nested := op.GetRequestTxn(); nested != nil && comparesModOf(nested, key) {
				return true
			}
		}
	}
	return false
}

// An idle delegation is not handed back while an evicted admission's revocation still waits
// for its Fence: A's delegation of k lingers idle past every lease, and the lock of another key
// that looks for idle delegations leaves k's, so A's next lock of k is admitted from it at once.
func TestSweepWaitsForEvictedFence(t *testing.T) {
	e := startEtcd(t)
	clock := recordlock.NewManualClock(time.Unix(1, 0))
	a := newNode(t, e, "a", nodeConfig{clock: clock, opts: []etcdcoord.Option{etcdcoord.WithLinger(time.Second)}})
	ctx := context.Background()
	var token uint64
	f := evictWhileFencing(t, a, "k", func(*fencing) {
		h, err := a.l.Lock(ctx, []byte("k"), cluster(10*time.Second, 10*time.Second))
		require.NoError(t, err)
		token = h.Token()
		require.True(t, h.Release())
	})
	// Every lease of k has ended, and a second of linger has passed; a lock of another key looks
	// for idle delegations.
	clock.Advance(12 * time.Second)
	hz, err := a.l.Lock(ctx, []byte("z"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	require.True(t, hz.Release())

	got := lockAsync(a, "k", cluster(time.Second, 10*time.Second))
	select {
	case r := <-got:
		require.NoError(t, r.err)
		assert.Equal(t, token, r.h.Token(), "a hand-back waits for the revocation of an admission let go "+
			"to keep the bound, but A's idle delegation was handed back while that admission's Fence ran")
		require.True(t, r.h.Release())
	case <-f.fenced:
		t.Fatal("the fence returned before the test let it")
	}
	f.finish()
	require.NoError(t, <-f.fenced)
}

// A released admission is kept, and its handle may still fence a write staged before its release
// , until RetainedPerKey later ones are kept beside it: only then is the oldest let go
// and revoked (the retention bound, no sooner).
func TestReleasedAdmissionsKeptUpToTheBound(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	ctx := context.Background()
	opts := cluster(10*time.Second, 10*time.Second)
	var released []*recordlock.Handle
	for range etcdcoord.RetainedPerKey {
		h, err := a.l.Lock(ctx, []byte("k"), opts)
		require.NoError(t, err)
		require.True(t, h.Release())
		released = append(released, h)
	}
	for i, h := range released {
		require.False(t, h.IsLeaseExpired(), "released handle %d of %d was revoked before the delegation "+
			"kept RetainedPerKey (%d) released admissions", i+1, len(released), etcdcoord.RetainedPerKey)
	}
	require.NoError(t, released[0].Fence(func() error { return nil }),
		"a released handle fences a write while its lease lasts")

	h, err := a.l.Lock(ctx, []byte("k"), opts) // one more kept: the oldest is let go
	require.NoError(t, err)
	require.Eventually(t, released[0].IsLeaseExpired, 5*time.Second, time.Millisecond,
		"the oldest released admission is revoked once the bound is passed")
	for _, later := range released[1:] {
		assert.False(t, later.IsLeaseExpired(), "only the oldest released admission is let go")
	}
	require.True(t, h.Release())
}
