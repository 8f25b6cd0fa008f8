package etcdcoord_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
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
	waitForKey(t, a.cli, recallKey("k")) // B has asked for the key back
	time.Sleep(300 * time.Millisecond)   // A is working; room for a wrong hand-off

	assert.False(t, ha.IsLeaseExpired(), "a recall does not take a key from a live holder, but A's was revoked")
	assert.False(t, admitted(got), "a recall waits for live admissions, but B was admitted while A's holder was live")
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
	waitForKey(t, a.cli, recallKey("k"))
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

// Nodes that take turns on a key: each Lock finds the key idle on the other node, which keeps
// it because nobody waited when it released. The asker's one Txn writes its recall, the holder
// hands the idle delegation over at once in one Txn, and no Release makes a request. With the
// next node already waiting, the holder hands the key over as soon as its holder releases, in
// one Txn, and that Release sends nothing itself. A key no other node wants stays delegated.
func TestNodesTakingTurnsRecallEachLock(t *testing.T) {
	e := startEtcd(t)
	nodes := []*node{newNode(t, e, "a", nodeConfig{}), newNode(t, e, "b", nodeConfig{})}
	ctx := context.Background()
	opts := cluster(time.Second, 10*time.Second)
	for _, n := range nodes { // its watch is established: the requests counted below are the locks'
		h, err := n.l.Lock(ctx, []byte("warm-up"+n.name), opts)
		require.NoError(t, err)
		require.True(t, h.Release())
	}
	h, err := nodes[0].l.Lock(ctx, []byte("k"), opts)
	require.NoError(t, err)
	require.True(t, h.Release())
	for i := range 6 {
		asker, holder := nodes[(i+1)%2], nodes[i%2]
		beforeAsker, beforeHolder := asker.reqs.snapshot(), holder.reqs.snapshot()
		h, err := asker.l.Lock(ctx, []byte("k"), opts)
		require.NoError(t, err)
		assert.Equal(t, map[string]int{txnMethod: 1}, asker.reqs.since(beforeAsker), "lock %d by %s", i, asker.name)
		assert.Equal(t, map[string]int{txnMethod: 1}, holder.reqs.since(beforeHolder), "hand-over %d by %s", i, holder.name)
		beforeAsker = asker.reqs.snapshot()
		require.True(t, h.Release())
		assert.Empty(t, asker.reqs.since(beforeAsker), "release %d by %s: nobody waits", i, asker.name)
		assert.Equal(t, 2, asker.coord.Stats().Delegations, "%s keeps the key it released", asker.name)
	}
	for _, n := range nodes {
		assert.Equal(t, uint64(3), n.coord.Stats().RecallsSent, "%s recalls the key once per lock", n.name)
		assert.Equal(t, uint64(3), n.coord.Stats().RecallsReceived, "%s", n.name)
		// The asker may be admitted before the reply to the hand-back reaches the holder.
		assert.Eventually(t, func() bool { return n.coord.Stats().HandBacks == 3 }, 10*time.Second, time.Millisecond,
			"%s hands the key back once per recall", n.name)
	}

	// B recalls the key once more, and A asks for it while B holds it.
	h, err = nodes[1].l.Lock(ctx, []byte("k"), opts)
	require.NoError(t, err)
	got := lockAsync(nodes[0], "k", opts)
	require.Eventually(t, func() bool { return nodes[1].coord.Stats().RecallsReceived == 4 }, 10*time.Second, time.Millisecond)
	before := nodes[1].reqs.snapshot()
	require.True(t, h.Release())
	assert.Empty(t, nodes[1].reqs.since(before), "the Release itself sends nothing")
	r := <-got
	require.NoError(t, r.err)
	assert.Equal(t, map[string]int{txnMethod: 1}, nodes[1].reqs.since(before), "B hands the key over in one Txn")
	assert.Greater(t, r.h.Token(), h.Token())
	require.True(t, r.h.Release())

	h, err = nodes[0].l.Lock(ctx, []byte("other"), opts)
	require.NoError(t, err)
	require.True(t, h.Release())
	before = nodes[0].reqs.snapshot()
	h, err = nodes[0].l.Lock(ctx, []byte("other"), opts)
	require.NoError(t, err)
	require.True(t, h.Release())
	assert.Empty(t, nodes[0].reqs.since(before), "a repeat lock of a key no other node wants")
	assert.Equal(t, 3, nodes[0].coord.Stats().Delegations)
}

// A recall asks for one hand-back. After B has locked a key once, A's first Lock recalls it
// (one Txn of A's; B hands it over), and then A keeps its delegation: no other node waits, so
// no Release of A's hands it back, and every later Lock+Release of A's, the first release after
// getting the key back included, makes no etcd request. So do locks of A's goroutines that
// queue for the key.
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
	lockRelease(a, "x") // A's watch is established: the requests counted below are the locks'
	lockRelease(a, "k")
	lockRelease(b, "k") // recalls the key from A

	before := a.reqs.snapshot()
	h, err := a.l.Lock(ctx, []byte("k"), opts) // recalls it from B
	require.NoError(t, err)
	assert.Equal(t, map[string]int{txnMethod: 1}, a.reqs.since(before), "A's Lock that gets the key back")
	before = a.reqs.snapshot()
	require.True(t, h.Release())
	for range 5 {
		lockRelease(a, "k")
	}
	h, err = a.l.Lock(ctx, []byte("k"), opts)
	require.NoError(t, err)
	next := lockAsync(a, "k", opts) // queues on A for the local key
	require.True(t, h.Release())
	r := <-next
	require.NoError(t, r.err)
	require.True(t, r.h.Release())
	assert.Empty(t, a.reqs.since(before), "A's releases and repeat locks after it got the key back")
	assert.Equal(t, r.h.Token(), h.Token(), "A kept one delegation")
	assert.Equal(t, uint64(1), a.coord.Stats().HandBacks, "A's one hand-back, to B's recall")
	// A may be admitted before the reply to B's hand-back reaches B.
	assert.Eventually(t, func() bool { return b.coord.Stats().HandBacks == 1 }, 10*time.Second, time.Millisecond,
		"B's one hand-back, to A's recall")

	for _, k := range []string{"x", "y"} { // and its other keys
		lockRelease(a, k)
		lockRelease(a, k)
	}
	assert.Equal(t, 3, a.coord.Stats().Delegations, "A keeps every key it locks")
}
