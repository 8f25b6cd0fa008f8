package etcdcoord_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/etcdcoord"
)

// A recall does not take the key from a live holder: B's request waits while A works, A's
// fenced write after the recall arrived still lands, and B is admitted once A releases.
func TestRecallWaitsForLiveHolder(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()

	ha, err := a.l.Lock(ctx, []byte("k"), cluster(10*time.Second, 10*time.Second))
	require.NoError(t, err)
	got := make(chan lockResult, 1)
	go func() {
		h, err := b.l.Lock(ctx, []byte("k"), cluster(10*time.Second, 20*time.Second))
		got <- lockResult{h, err}
	}()
	waitForKey(t, a.cli, "/recordlock/r/"+encode("k")) // B has asked for the key back
	time.Sleep(300 * time.Millisecond)                 // A is working; room for a wrong hand-off

	assert.False(t, ha.IsLeaseExpired(), "A's live holder was revoked by the recall")
	assert.False(t, admitted(got), "B was admitted while A's holder was live")
	// A new local lock of the key on A is not admitted from the recalled delegation.
	_, err = a.l.TryLock([]byte("k"), recordlock.Options{Scope: recordlock.ScopeNode})
	require.ErrorIs(t, err, recordlock.ErrLocked)
	require.NoError(t, ha.Fence(func() error {
		_, err := a.cli.Put(ctx, "value/k", "a")
		return err
	}), "A's fenced write after the recall arrived")
	require.True(t, ha.Release())

	r := <-got
	require.NoError(t, r.err)
	assert.Greater(t, r.h.Token(), ha.Token())
	resp, err := b.cli.Get(ctx, "value/k")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	assert.Equal(t, "a", string(resp.Kvs[0].Value))
	require.True(t, r.h.Release())
}

// A cross-node TryLock of a held key fails without taking it from its live holder.
func TestCrossNodeTryLockDoesNotSteal(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})

	ha, err := a.l.Lock(context.Background(), []byte("k"), cluster(10*time.Second, 10*time.Second))
	require.NoError(t, err)
	_, err = b.l.TryLock([]byte("k"), cluster(time.Second, 300*time.Millisecond))
	require.ErrorIs(t, err, recordlock.ErrLocked)
	require.ErrorIs(t, err, recordlock.ErrTimeout)
	assert.False(t, ha.IsLeaseExpired(), "the TryLock took the key from its live holder")
	require.NoError(t, ha.Fence(func() error { return nil }))
	require.True(t, ha.Release())
}

// A fenced commit in flight delays the hand-back until it returns, even past the holder's
// deadline: the successor is admitted only after the commit.
func TestFencedCommitDelaysHandBack(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	const lease = 500 * time.Millisecond

	ha, err := a.l.Lock(context.Background(), []byte("k"), cluster(lease, 10*time.Second))
	require.NoError(t, err)
	entered, finish := make(chan struct{}), make(chan struct{})
	fenced := make(chan error, 1)
	go func() {
		fenced <- ha.Fence(func() error { close(entered); <-finish; return nil })
	}()
	<-entered
	got := lockAsync(b, "k", cluster(time.Second, 20*time.Second))
	waitForKey(t, a.cli, "/recordlock/r/"+encode("k"))
	select {
	case <-ha.Done(): // the deadline passed while the commit runs
	case <-time.After(10 * time.Second):
		t.Fatal("A's lease did not lapse")
	}
	time.Sleep(300 * time.Millisecond) // room for a wrong hand-back
	assert.False(t, admitted(got), "B was admitted while A's fenced commit ran")

	close(finish)
	require.NoError(t, <-fenced)
	r := <-got
	require.NoError(t, r.err)
	require.True(t, r.h.Release())
}

// Nodes that take turns on a key stop recalling it: once a node has held the key, and another
// node held it after that, it hands the key back when its last holder releases it, so the next
// node's Lock is the one Txn that creates the delegation, and its Release the one that deletes
// it. A key no other node wants stays delegated, and its repeat locks make no request.
func TestContendedKeyIsHandedBackOnRelease(t *testing.T) {
	e := startEtcd(t)
	nodes := []*node{newNode(t, e, "a", nodeConfig{}), newNode(t, e, "b", nodeConfig{})}
	ctx := context.Background()
	opts := cluster(time.Second, 10*time.Second)
	lockRelease := func(n *node, key string) {
		h, err := n.l.Lock(ctx, []byte(key), opts)
		require.NoError(t, err)
		require.True(t, h.Release())
	}
	lockRelease(nodes[0], "k")
	lockRelease(nodes[1], "k") // recalls the key from A
	lockRelease(nodes[0], "k") // recalls it from B; A has held it, and B after that
	require.Eventually(t, func() bool { return nodes[0].coord.Stats().Delegations == 0 }, 10*time.Second, time.Millisecond)
	recalls := []uint64{nodes[0].coord.Stats().RecallsSent, nodes[1].coord.Stats().RecallsSent}
	for i := range 6 {
		n := nodes[(i+1)%2]
		before := n.reqs.snapshot()
		h, err := n.l.Lock(ctx, []byte("k"), opts)
		require.NoError(t, err)
		assert.Equal(t, map[string]int{txnMethod: 1}, n.reqs.since(before), "lock %d by %s", i, n.name)
		before = n.reqs.snapshot()
		require.True(t, h.Release())
		require.Eventually(t, func() bool { return n.coord.Stats().Delegations == 0 }, 10*time.Second, time.Millisecond,
			"%s kept the key after release %d", n.name, i) // the hand-back runs in the background
		assert.Equal(t, map[string]int{txnMethod: 1}, n.reqs.since(before), "release %d by %s", i, n.name)
	}
	assert.Equal(t, recalls, []uint64{nodes[0].coord.Stats().RecallsSent, nodes[1].coord.Stats().RecallsSent}, "no more recalls")

	lockRelease(nodes[0], "other")
	before := nodes[0].reqs.snapshot()
	lockRelease(nodes[0], "other")
	assert.Empty(t, nodes[0].reqs.since(before), "a repeat lock of a key no other node wants")
	assert.Equal(t, 1, nodes[0].coord.Stats().Delegations)
}

// A node whose own next lock has to wait for the hand-back its release started keeps its next
// delegation of the key: its goroutines queue for the key, and each would otherwise pay two
// Txns where a repeat lock pays none.
func TestLocalDemandKeepsContendedKey(t *testing.T) {
	localDemandKeepsContendedKey(t, recordlock.SystemClock())
}

// The same on a clock whose monotonic reading is 0 throughout: a reading of 0 is a time like
// any other, not "never wanted here".
func TestLocalDemandKeepsContendedKeyAtMonoZero(t *testing.T) {
	localDemandKeepsContendedKey(t, recordlock.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
}

func localDemandKeepsContendedKey(t *testing.T, clk recordlock.Clock) {
	e := startEtcd(t)
	a, b := newNode(t, e, "a", nodeConfig{clock: clk}), newNode(t, e, "b", nodeConfig{clock: clk})
	ctx := context.Background()
	opts := cluster(time.Second, 10*time.Second)
	for _, n := range []*node{a, b} { // B recalls the key from A: both know it is contended
		h, err := n.l.Lock(ctx, []byte("k"), opts)
		require.NoError(t, err)
		require.True(t, h.Release())
	}
	h, err := a.l.Lock(ctx, []byte("k"), opts)
	require.NoError(t, err)

	sent, proceed := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	a.reqs.setHook(func(ctx context.Context, method string, req any, invoke func() error) error {
		if method == txnMethod && held.CompareAndSwap(false, true) { // the hand-back on release
			close(sent)
			<-proceed
		}
		return invoke()
	})
	released := make(chan bool, 1)
	go func() { released <- h.Release() }()
	<-sent
	next := lockAsync(a, "k", opts)
	// The next lock reaches the delegation being handed back (not a sleep: a slow host would let
	// the hand-back finish first, and the lock would find no delegation at all).
	require.Eventually(t, func() bool { return etcdcoord.WantedHere(a.coord, "k") }, 10*time.Second, time.Millisecond,
		"the next lock never found the delegation being handed back")
	require.False(t, admitted(next), "admitted from a delegation being handed back")
	close(proceed)
	require.True(t, <-released)
	r := <-next
	require.NoError(t, r.err)
	assert.Greater(t, r.h.Token(), h.Token(), "admitted from a new delegation")

	before := a.reqs.snapshot()
	require.True(t, r.h.Release())
	assert.Empty(t, a.reqs.since(before), "the release handed the key back")
	assert.Equal(t, 1, a.coord.Stats().Delegations)
	h, err = a.l.Lock(ctx, []byte("k"), opts)
	require.NoError(t, err)
	require.True(t, h.Release())
	assert.Empty(t, a.reqs.since(before), "a repeat lock made a request")
}

// A recall asks for one hand-back. After B has locked a key once, A's locks of it cost
// requests until A has it again with no other node wanting it since: then A keeps its
// delegation, and its repeat Lock+Release makes no etcd request.
func TestOneRecallOneHandBack(t *testing.T) {
	e := startEtcd(t)
	a, b := newNode(t, e, "a", nodeConfig{}), newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	opts := cluster(time.Second, 10*time.Second)
	lockRelease := func(n *node, key string) {
		h, err := n.l.Lock(ctx, []byte(key), opts)
		require.NoError(t, err)
		require.True(t, h.Release())
	}
	lockRelease(a, "k")
	lockRelease(b, "k") // recalls the key from A
	lockRelease(a, "k") // recalls it from B
	// A hands the key back once at most: B held it after A did.
	require.Eventually(t, func() bool {
		before := a.reqs.snapshot()
		lockRelease(a, "k")
		return len(a.reqs.since(before)) == 0
	}, 10*time.Second, 10*time.Millisecond, "A's repeat locks kept making requests")
	assert.LessOrEqual(t, a.coord.Stats().HandBacks, uint64(2), "A's hand-backs: to B's recall, and at most one more")
	for i := range 5 {
		before := a.reqs.snapshot()
		lockRelease(a, "k")
		assert.Empty(t, a.reqs.since(before), "repeat lock %d", i)
	}
	for _, k := range []string{"x", "y"} { // and its other keys
		lockRelease(a, k)
		lockRelease(a, k)
	}
	assert.Equal(t, 3, a.coord.Stats().Delegations, "A keeps every key it locks")
}
