package etcdcoord_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/etcdcoord"
	"github.com/recordlock/recordlock/internal/testutil"
)

// txnLock is a Txn's Lock of key started in a goroutine. A test that ends before it returns
// cancels it and waits for it (testutil.Go) before the Txn's Rollback: a Txn is used by one
// goroutine, so a Txn passed here is rolled back by a cleanup, not a defer.
func txnLock(t *testing.T, txn *recordlock.Txn, key string, opts recordlock.Options) chan lockResult {
	got := make(chan lockResult, 1)
	testutil.Go(t, context.Background(), func(ctx context.Context) {
		h, err := txn.Lock(ctx, []byte(key), opts)
		got <- lockResult{h, err}
	})
	return got
}

// Two Txns on two nodes lock two records in opposite orders: the cycle is broken within a second,
// long before the Timeout, by exactly one ErrDeadlock that names both Txns with their nodes; the
// other Txn is served once the victim rolls back. The victim is the Txn whose wait across nodes
// began last, B's, even when B is slower to confirm the cycle than A is to see it.
func TestDeadlockAcrossTwoNodes(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	opts := cluster(10*time.Second, 20*time.Second)

	ta, err := a.l.BeginTx(recordlock.TxnOptions{Name: "transfer-1"})
	require.NoError(t, err)
	t.Cleanup(ta.Rollback)
	tb, err := b.l.BeginTx(recordlock.TxnOptions{Name: "transfer-2"})
	require.NoError(t, err)
	t.Cleanup(tb.Rollback)
	_, err = ta.Lock(ctx, []byte("acct/1"), opts)
	require.NoError(t, err)
	_, err = tb.Lock(ctx, []byte("acct/2"), opts)
	require.NoError(t, err)

	// B's confirming Txn is slow: A, which sees the cycle as soon, must leave it to B.
	b.reqs.setHook(func(ctx context.Context, method string, req any, invoke func() error) error {
		if isConfirm(req) {
			time.Sleep(200 * time.Millisecond)
		}
		return invoke()
	})
	t.Cleanup(func() { b.reqs.setHook(nil) })
	ga := txnLock(t, ta, "acct/2", opts)
	require.Eventually(t, func() bool { return b.coord.Stats().RecallsReceived == 1 }, 5*time.Second, time.Millisecond)
	start := time.Now()
	gb := txnLock(t, tb, "acct/1", opts)
	var victim, other chan lockResult
	var vtxn *recordlock.Txn
	select {
	case r := <-ga:
		require.ErrorIs(t, r.err, recordlock.ErrDeadlock)
		victim, other, vtxn = ga, gb, ta
		ga <- r
	case r := <-gb:
		require.ErrorIs(t, r.err, recordlock.ErrDeadlock)
		victim, other, vtxn = gb, ga, tb
		gb <- r
	case <-time.After(5 * time.Second):
		t.Fatal("the cycle across nodes was not broken within 5 s")
	}
	elapsed := time.Since(start)
	assert.Less(t, elapsed, time.Second, "broken within 1 s of forming")
	r := <-victim
	var de *recordlock.DeadlockError
	require.True(t, errors.As(r.err, &de))
	require.Len(t, de.Cycle, 2, "%v", de)
	nodes := map[string]string{}
	for _, w := range de.Cycle {
		nodes[w.Txn] = w.Node
		assert.Equal(t, "default", w.ColumnFamily)
	}
	assert.Equal(t, map[string]string{"transfer-1": "a", "transfer-2": "b"}, nodes, "%v", de)
	assert.Equal(t, "transfer-2", de.Cycle[0].Txn, "the victim is the wait across nodes that began last")
	assert.False(t, admitted(other), "both requests failed")
	vtxn.Rollback()
	o := <-other
	require.NoError(t, o.err, "the other Txn is served once the victim rolls back")
	assert.Equal(t, uint64(1), a.coord.Stats().Deadlocks+b.coord.Stats().Deadlocks, "exactly one victim")
	t.Logf("broken after %v: %v", elapsed, de)
}

// A cycle of four Txns over three nodes, with a wait within one node on its path, closed last by
// that local wait: t1 on A waits for r2, held by t2 on B; t3 on B waits for r4, held by t4 on C;
// t4 waits for r1, held by t1; then t2 waits for r3, held by t3 on its own node. Exactly one
// request fails with ErrDeadlock, and the cycle it names runs through every Txn.
func TestDeadlockOfFourTxnsOverThreeNodes(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	c := newNode(t, e, "c", nodeConfig{})
	ctx := context.Background()
	opts := cluster(10*time.Second, 20*time.Second)
	begin := func(n *node, name string, key string) *recordlock.Txn {
		txn, err := n.l.BeginTx(recordlock.TxnOptions{Name: name})
		require.NoError(t, err)
		t.Cleanup(txn.Rollback)
		_, err = txn.Lock(ctx, []byte(key), opts)
		require.NoError(t, err)
		return txn
	}
	t1, t2, t3, t4 := begin(a, "t1", "r1"), begin(b, "t2", "r2"), begin(b, "t3", "r3"), begin(c, "t4", "r4")

	waits := []chan lockResult{txnLock(t, t1, "r2", opts)}
	require.Eventually(t, func() bool { return b.coord.Stats().RecallsReceived == 1 }, 5*time.Second, time.Millisecond)
	waits = append(waits, txnLock(t, t3, "r4", opts))
	require.Eventually(t, func() bool { return c.coord.Stats().RecallsReceived == 1 }, 5*time.Second, time.Millisecond)
	waits = append(waits, txnLock(t, t4, "r1", opts))
	require.Eventually(t, func() bool { return a.coord.Stats().RecallsReceived == 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(100 * time.Millisecond) // no cycle yet: nothing may fail
	for i, w := range waits {
		assert.False(t, admitted(w), "wait %d returned before the cycle closed", i)
	}
	start := time.Now()
	waits = append(waits, txnLock(t, t2, "r3", opts)) // the local wait that closes the cycle

	txns := []*recordlock.Txn{t1, t3, t4, t2}
	failed := -1
	for failed < 0 {
		for i, w := range waits {
			if admitted(w) {
				failed = i
			}
		}
		require.Less(t, time.Since(start), 5*time.Second, "the cycle was not broken")
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	r := <-waits[failed]
	require.ErrorIs(t, r.err, recordlock.ErrDeadlock)
	var de *recordlock.DeadlockError
	require.True(t, errors.As(r.err, &de))
	assert.Len(t, de.Cycle, 4, "%v", de)
	assert.Less(t, elapsed, time.Second)
	time.Sleep(100 * time.Millisecond)
	for i, w := range waits {
		if i != failed {
			assert.False(t, admitted(w), "a second request failed or was served: %d", i)
		}
	}
	// The victim's locks go; the chain behind it is served in turn as each Txn ends. waitsFor[i]
	// is the wait for the record txns[i] holds. Each Lock returns before its Txn ends: a Txn is
	// used by one goroutine.
	waitsFor := []int{2, 3, 1, 0}
	ended := failed
	for range len(txns) - 1 {
		txns[ended].Rollback()
		next := waitsFor[ended]
		select {
		case r := <-waits[next]:
			require.NoError(t, r.err, "wait %d is served once the Txn ahead of it ends", next)
		case <-time.After(10 * time.Second):
			t.Fatalf("wait %d was not served after the Txn ahead of it ended", next)
		}
		ended = next
	}
	t.Logf("broken after %v: %v", elapsed, de)
}

// A cycle through a shared cluster lock: t1 on A reads r1 and asks to read r2, which t2 on B
// writes; t2 asks to write r1. Readers do not wait for readers, but a writer waits for them and a
// reader for a writer, so this is a cycle, broken by one ErrDeadlock.
func TestDeadlockThroughSharedLock(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	write := cluster(10*time.Second, 20*time.Second)
	read := sharedCluster(10*time.Second, 20*time.Second)
	t1 := a.l.Begin()
	t.Cleanup(t1.Rollback)
	t2 := b.l.Begin()
	t.Cleanup(t2.Rollback)
	_, err := t1.Lock(ctx, []byte("r1"), read)
	require.NoError(t, err)
	_, err = t2.Lock(ctx, []byte("r2"), write)
	require.NoError(t, err)
	g1 := txnLock(t, t1, "r2", read)
	g2 := txnLock(t, t2, "r1", write)
	var failed, other chan lockResult
	var victim *recordlock.Txn
	select {
	case r := <-g1:
		failed, other, victim = g1, g2, t1
		g1 <- r
	case r := <-g2:
		failed, other, victim = g2, g1, t2
		g2 <- r
	case <-time.After(5 * time.Second):
		t.Fatal("the cycle through a shared lock was not broken")
	}
	r := <-failed
	require.ErrorIs(t, r.err, recordlock.ErrDeadlock)
	time.Sleep(100 * time.Millisecond)
	assert.False(t, admitted(other), "a second request failed or was served")
	victim.Rollback()
	o := <-other
	require.NoError(t, o.err, "the other Txn is served once the victim rolls back")
}

// A waiter that times out while the cycle through it is being confirmed makes no victim: its
// wait is deleted from etcd before its Lock returns, so the confirming Txn finds the cycle gone.
// The other Txn goes on waiting and is served once the first rolls back.
func TestTimedOutWaiterMakesNoVictim(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	long := cluster(10*time.Second, 20*time.Second)
	t1 := a.l.Begin()
	t.Cleanup(t1.Rollback)
	t2 := b.l.Begin()
	t.Cleanup(t2.Rollback)
	_, err := t1.Lock(ctx, []byte("r1"), long)
	require.NoError(t, err)
	_, err = t2.Lock(ctx, []byte("r2"), long)
	require.NoError(t, err)

	// Whichever node confirms the cycle, its Txn waits until t1's Lock has timed out.
	timedOut := make(chan struct{})
	endTimeout := sync.OnceFunc(func() { close(timedOut) })
	var confirms atomic.Int32
	hold := func(ctx context.Context, method string, req any, invoke func() error) error {
		if isConfirm(req) {
			confirms.Add(1)
			<-timedOut
		}
		return invoke()
	}
	a.reqs.setHook(hold)
	b.reqs.setHook(hold)
	t.Cleanup(func() { a.reqs.setHook(nil); b.reqs.setHook(nil) })
	g2 := txnLock(t, t2, "r1", long)
	t.Cleanup(endTimeout) // before g2's cleanup waits for its Lock, which may be held here
	require.Eventually(t, func() bool { return a.coord.Stats().RecallsReceived == 1 }, 5*time.Second, time.Millisecond)
	_, err = t1.Lock(ctx, []byte("r2"), cluster(10*time.Second, 500*time.Millisecond))
	require.ErrorIs(t, err, recordlock.ErrTimeout, "t1's wait ran out")
	require.Positive(t, confirms.Load(), "the cycle was found and a confirmation sent while t1 waited")
	endTimeout()
	time.Sleep(300 * time.Millisecond)
	assert.False(t, admitted(g2), "t2 was failed by a cycle that had gone")
	assert.Zero(t, a.coord.Stats().Deadlocks+b.coord.Stats().Deadlocks)
	t1.Rollback()
	r := <-g2
	require.NoError(t, r.err)
}

// isConfirm reports whether req is a deadlock's confirming Txn: it compares the ModRevision of
// a published wait.
func isConfirm(req any) bool {
	txn, ok := req.(*etcdserverpb.TxnRequest)
	if !ok {
		return false
	}
	for _, c := range txn.Compare {
		if c.Target == etcdserverpb.Compare_MOD && strings.Contains(string(c.Key), "/w/") {
			return true
		}
	}
	return false
}

// A node that dies with its wait published leaves nothing that fails another node's Txn once
// its etcd lease has expired: C's Txn waits for r1, held by A's Txn; C is cut off from etcd
// and its lease expires; A's Txn then locks C's record, with no victim.
func TestDeadNodeLeavesNoEdge(t *testing.T) {
	e := startEtcd(t)
	p := newProxy(t, e.Clients[0].Addr().String(), false)
	ttl := []etcdcoord.Option{etcdcoord.WithTTL(2 * time.Second), etcdcoord.WithSkew(500 * time.Millisecond)}
	a := newNode(t, e, "a", nodeConfig{opts: ttl})
	c := newNode(t, e, "c", nodeConfig{endpoints: []string{p.addr()}, faulty: true, opts: ttl})
	ctx := context.Background()
	opts := cluster(time.Second, 10*time.Second)
	t1 := a.l.Begin()
	t.Cleanup(t1.Rollback)
	tc := c.l.Begin()
	t.Cleanup(tc.Rollback)
	_, err := t1.Lock(ctx, []byte("r1"), opts)
	require.NoError(t, err)
	_, err = tc.Lock(ctx, []byte("rc"), opts)
	require.NoError(t, err)
	gc := txnLock(t, tc, "r1", opts)
	waitForPrefix(t, a.cli, "/recordlock/w/"+encode("c")+"/")
	p.cut() // C dies with its wait published
	waitForNoPrefix(t, a.cli, "/recordlock/w/"+encode("c")+"/")
	_, err = t1.Lock(ctx, []byte("rc"), opts)
	require.NoError(t, err, "C's record once its lease expired")
	assert.Zero(t, a.coord.Stats().Deadlocks)
	p.heal()
	<-gc
}

// waitForPrefix blocks until a key under prefix exists in etcd.
func waitForPrefix(t *testing.T, cli *clientv3.Client, prefix string) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count > 0
	}, 10*time.Second, 5*time.Millisecond, "no key under %s", prefix)
}

// waitForNoPrefix blocks until no key under prefix exists in etcd.
func waitForNoPrefix(t *testing.T, cli *clientv3.Client, prefix string) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 0
	}, 20*time.Second, 10*time.Millisecond, "keys left under %s", prefix)
}

// A Txn's wait for another node is published under a key of the Txn, and the key of a wait that
// was granted is deleted in the background: that deletion must not take the wait of the Txn's
// next Lock with it. t1 on A waits for r1, held by t2 on B, and is granted it; the deletion of
// that wait is held back until t1's next Lock, of r2 held by t3 on B, has published its wait.
// Then t3 asks for r1, closing the cycle t1 → t3 → t1, which one ErrDeadlock must break.
func TestGrantedWaitsDeletionSparesTheNextWait(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	opts := cluster(10*time.Second, 20*time.Second)
	t2 := b.l.Begin()
	t.Cleanup(t2.Rollback)
	_, err := t2.Lock(ctx, []byte("r1"), opts)
	require.NoError(t, err)
	t3, err := b.l.BeginTx(recordlock.TxnOptions{Name: "t3"})
	require.NoError(t, err)
	t.Cleanup(t3.Rollback)
	_, err = t3.Lock(ctx, []byte("r2"), opts)
	require.NoError(t, err)
	t1, err := a.l.BeginTx(recordlock.TxnOptions{Name: "t1"})
	require.NoError(t, err)
	t.Cleanup(t1.Rollback)

	// A's first deletion of a wait waits for release.
	held, release, deleted := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	a.reqs.setHook(func(ctx context.Context, method string, req any, invoke func() error) error {
		if !isWaitDeletion(req) || !first.CompareAndSwap(false, true) {
			return invoke()
		}
		close(held)
		<-release
		err := invoke()
		close(deleted)
		return err
	})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	t.Cleanup(func() { letGo(); a.reqs.setHook(nil) })

	g1 := txnLock(t, t1, "r1", opts)
	require.Eventually(t, func() bool { return b.coord.Stats().RecallsReceived == 1 }, 5*time.Second, time.Millisecond)
	t2.Rollback() // B hands r1 over to t1
	r := <-g1
	require.NoError(t, r.err)
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the wait of t1's granted Lock was not deleted")
	}
	g2 := txnLock(t, t1, "r2", opts)
	require.Eventually(t, func() bool { return b.coord.Stats().RecallsReceived == 2 }, 5*time.Second, time.Millisecond,
		"t1's wait for r2 is in etcd")
	letGo()
	<-deleted
	g3 := txnLock(t, t3, "r1", opts)
	select {
	case r := <-g3:
		require.ErrorIs(t, r.err, recordlock.ErrDeadlock, "t3, whose wait began last, is the victim")
	case r := <-g2:
		t.Fatalf("t1's Lock of r2 returned first: %v", r.err)
	case <-time.After(5 * time.Second):
		t.Fatal("the cycle t1 → t3 → t1 was not broken: the deletion of t1's first wait took its second")
	}
	t3.Rollback()
	r = <-g2
	require.NoError(t, r.err, "t1 is served once the victim rolls back")
	assert.Equal(t, uint64(1), a.coord.Stats().Deadlocks+b.coord.Stats().Deadlocks)
}

// isWaitDeletion reports whether req is a Txn whose only operation is the deletion of a published
// wait.
func isWaitDeletion(req any) bool {
	txn, ok := req.(*etcdserverpb.TxnRequest)
	if !ok || len(txn.Success) != 1 || len(txn.Failure) != 0 {
		return false
	}
	del := txn.Success[0].GetRequestDeleteRange()
	return del != nil && strings.Contains(string(del.Key), "/w/")
}

// Two nodes that close the same cycle at the same instant make exactly one victim: ta on A holds
// r1 and tb on B holds r2; each asks for the other's record, and the cold Txns of both requests,
// which publish their waits, are held until both have been sent and then let go together. One
// request fails with ErrDeadlock, the other goes on waiting and is served once the victim rolls
// back.
func TestCycleClosedOnTwoNodesAtOnceMakesOneVictim(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	opts := cluster(10*time.Second, 20*time.Second)
	ta, err := a.l.BeginTx(recordlock.TxnOptions{Name: "ta"})
	require.NoError(t, err)
	t.Cleanup(ta.Rollback)
	tb, err := b.l.BeginTx(recordlock.TxnOptions{Name: "tb"})
	require.NoError(t, err)
	t.Cleanup(tb.Rollback)
	_, err = ta.Lock(ctx, []byte("r1"), opts)
	require.NoError(t, err)
	_, err = tb.Lock(ctx, []byte("r2"), opts)
	require.NoError(t, err)

	// Each node's first cold Txn of the other's record waits for go.
	sent, goAhead := make(chan struct{}, 2), make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(goAhead) }) }
	hold := func(key string) func(context.Context, string, any, func() error) error {
		var fired atomic.Bool
		return func(ctx context.Context, method string, req any, invoke func() error) error {
			if isColdTxnOf(req, key) && fired.CompareAndSwap(false, true) {
				sent <- struct{}{}
				<-goAhead
			}
			return invoke()
		}
	}
	a.reqs.setHook(hold(exclusiveKey("r2")))
	b.reqs.setHook(hold(exclusiveKey("r1")))
	ga := txnLock(t, ta, "r2", opts)
	gb := txnLock(t, tb, "r1", opts)
	// After the Locks: this runs before their cleanups wait for them, and either may be held here.
	t.Cleanup(func() { letGo(); a.reqs.setHook(nil); b.reqs.setHook(nil) })
	for range 2 {
		select {
		case <-sent:
		case <-time.After(5 * time.Second):
			t.Fatal("the cold Txns of both requests were not sent")
		}
	}
	letGo()

	var victim, other chan lockResult
	var vtxn *recordlock.Txn
	select {
	case r := <-ga:
		victim, other, vtxn = ga, gb, ta
		ga <- r
	case r := <-gb:
		victim, other, vtxn = gb, ga, tb
		gb <- r
	case <-time.After(5 * time.Second):
		t.Fatal("the cycle was not broken")
	}
	r := <-victim
	require.ErrorIs(t, r.err, recordlock.ErrDeadlock)
	time.Sleep(300 * time.Millisecond)
	require.False(t, admitted(other), "both requests returned")
	assert.Equal(t, uint64(1), a.coord.Stats().Deadlocks+b.coord.Stats().Deadlocks, "exactly one victim")
	vtxn.Rollback()
	select {
	case o := <-other:
		require.NoError(t, o.err, "the other Txn is served once the victim rolls back")
	case <-time.After(10 * time.Second):
		t.Fatal("the other Txn was not served after the victim rolled back")
	}
	assert.Equal(t, uint64(1), a.coord.Stats().Deadlocks+b.coord.Stats().Deadlocks, "exactly one victim")
	t.Logf("victim %s: %v", vtxn.Name(), r.err)
}

// isColdTxnOf reports whether req is the cold Txn of a request for the record whose exclusive
// key is key: its first compare is that key's CreateRevision.
func isColdTxnOf(req any, key string) bool {
	txn, ok := req.(*etcdserverpb.TxnRequest)
	return ok && len(txn.Compare) > 0 && txn.Compare[0].Target == etcdserverpb.Compare_CREATE &&
		string(txn.Compare[0].Key) == key
}

// A Txn only queued ahead in the cycle is not its victim. T3 on A holds rX and T2 on B holds
// rY; T2 asks for rX; T1 on A, holding nothing, asks for rY; T3 asks for rY and queues on A
// behind T1, which holds A's key of rY while it asks the cluster. The cycle T2 → T3 → T1 → T2
// runs through T1, but failing T1 would leave T3 waiting for T2 all the same: one of T2 and T3
// fails, once, and T1 is served in turn.
func TestTxnQueuedAheadIsNotTheVictim(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	opts := cluster(10*time.Second, 20*time.Second)
	begin := func(n *node, name string) *recordlock.Txn {
		txn, err := n.l.BeginTx(recordlock.TxnOptions{Name: name})
		require.NoError(t, err)
		t.Cleanup(txn.Rollback)
		return txn
	}
	t1, t2, t3 := begin(a, "t1"), begin(b, "t2"), begin(a, "t3")
	_, err := t3.Lock(ctx, []byte("rX"), opts)
	require.NoError(t, err)
	_, err = t2.Lock(ctx, []byte("rY"), opts)
	require.NoError(t, err)
	g2 := txnLock(t, t2, "rX", opts)
	require.Eventually(t, func() bool { return a.coord.Stats().RecallsReceived == 1 }, 5*time.Second, time.Millisecond)
	g1 := txnLock(t, t1, "rY", opts)
	require.Eventually(t, func() bool { return b.coord.Stats().RecallsReceived == 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	g3 := txnLock(t, t3, "rY", opts)

	var victim string
	select {
	case r := <-g1:
		t.Fatalf("t1, only queued ahead of t3, returned: %v", r.err)
	case r := <-g2:
		require.ErrorIs(t, r.err, recordlock.ErrDeadlock)
		victim = "t2"
		t2.Rollback()
	case r := <-g3:
		require.ErrorIs(t, r.err, recordlock.ErrDeadlock)
		victim = "t3"
		t3.Rollback()
	case <-time.After(5 * time.Second):
		t.Fatal("the cycle was not broken")
	}
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, uint64(1), a.coord.Stats().Deadlocks+b.coord.Stats().Deadlocks, "one victim (%s)", victim)
	assert.False(t, victim == "t3" && admitted(g1), "t1 was served while t2 held rY")
	if victim == "t3" {
		r := <-g2 // t3's rollback frees rX for t2, which commits and frees rY
		require.NoError(t, r.err)
		t2.Rollback()
	}
	r := <-g1
	require.NoError(t, r.err, "t1 is served in turn")
	if victim == "t2" {
		t1.Rollback()
		r := <-g3
		require.NoError(t, r.err, "t3 is served after t1")
	}
}
