package etcdcoord_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/etcdcoord"
	"github.com/recordlock/recordlock/internal/testutil"
)

// sharedCluster are the options of a cluster-scoped shared lock.
func sharedCluster(lease, timeout time.Duration) recordlock.Options {
	opts := cluster(lease, timeout)
	opts.Shared = true
	return opts
}

// Readers on two nodes hold a record at once: B's shared request finds it held only shared and
// costs B one Txn and no recall; A's repeat readers, and B's, make no etcd request at all.
func TestReadersShareAcrossNodes(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	opts := sharedCluster(10*time.Second, 5*time.Second)

	ra, err := a.l.Lock(ctx, []byte("k"), opts)
	require.NoError(t, err)
	warm, err := b.l.Lock(ctx, []byte("warm-up"), opts) // B's watch has read the prefix
	require.NoError(t, err)
	require.True(t, warm.Release())
	before := b.coord.Stats().Requests
	rb, err := b.l.Lock(ctx, []byte("k"), opts)
	require.NoError(t, err, "a reader on B while A's reader holds the record")
	assert.Equal(t, uint64(1), b.coord.Stats().Requests-before,
		"B's shared request of a record held only shared costs B one Txn")
	assert.False(t, ra.IsLeaseExpired(), "B's reader took the record from A's")
	assert.Zero(t, a.coord.Stats().RecallsReceived, "a reader recalled a reader")
	assert.Zero(t, b.coord.Stats().RecallsSent, "a reader recalled a reader")

	for _, n := range []*node{a, b} {
		before := n.coord.Stats().Requests
		for range 20 {
			h, err := n.l.Lock(ctx, []byte("k"), opts)
			require.NoError(t, err)
			require.True(t, h.Release())
		}
		assert.Equal(t, before, n.coord.Stats().Requests, "%s: repeat readers from the node's shared delegation", n.name)
	}
	require.True(t, ra.Release())
	require.True(t, rb.Release())
}

// A writer recalls every reader's node and is granted once the last has handed back; while it
// waits, neither holding node admits a new reader and no other node creates a shared delegation
// (a stream of readers never starves it), and a reader that asks after it is served after it.
// Its token exceeds every reader's.
func TestWriterRecallsEveryReaderAndIsNotPassed(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	w := newNode(t, e, "w", nodeConfig{})
	r := newNode(t, e, "r", nodeConfig{})
	ctx := context.Background()
	read := sharedCluster(10*time.Second, 20*time.Second)

	ra, err := a.l.Lock(ctx, []byte("k"), read)
	require.NoError(t, err)
	rb, err := b.l.Lock(ctx, []byte("k"), read)
	require.NoError(t, err)

	writer := lockAsync(w, "k", cluster(10*time.Second, 20*time.Second))
	waitForKey(t, a.cli, recallKey("k"))
	require.Eventually(t, func() bool {
		return a.coord.Stats().RecallsReceived == 1 && b.coord.Stats().RecallsReceived == 1
	}, 10*time.Second, time.Millisecond, "the writer's recall reaches every holding node")
	reader := lockAsync(r, "k", read) // asks after the writer
	for _, n := range []*node{a, b} {
		_, err := n.l.TryLock([]byte("k"), sharedCluster(10*time.Second, 300*time.Millisecond))
		require.ErrorIs(t, err, recordlock.ErrTimeout, "%s admitted a new reader while a writer waits", n.name)
	}
	assert.False(t, admitted(writer), "the writer was admitted while readers held the record")
	assert.False(t, admitted(reader), "a reader that asked after the writer passed it")
	assert.False(t, ra.IsLeaseExpired(), "the recall revoked a live reader")

	require.True(t, ra.Release())
	time.Sleep(300 * time.Millisecond) // room for a wrong grant with one reader left
	assert.False(t, admitted(writer), "the writer was admitted while B's reader held the record")
	require.True(t, rb.Release())
	wr := <-writer
	require.NoError(t, wr.err, "the writer once the last reader has handed back")
	assert.Greater(t, wr.h.Token(), max(ra.Token(), rb.Token()), "a writer's token exceeds every earlier reader's")
	time.Sleep(300 * time.Millisecond)
	assert.False(t, admitted(reader), "a reader was admitted beside the writer")
	require.True(t, wr.h.Release())
	rr := <-reader
	require.NoError(t, rr.err)
	assert.Greater(t, rr.h.Token(), wr.h.Token(), "a reader's token exceeds the earlier writer's")
	require.True(t, rr.h.Release())
}

// An exclusive delegation whose live holders are all readers, asked for by a reader elsewhere,
// turns shared (the down-conversion): its readers keep their admissions and the other reader is
// granted beside them. Its writers wait meanwhile; a writer on that node afterwards recalls the
// other reader.
func TestExclusiveDelegationTurnsSharedForAReader(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	read := sharedCluster(10*time.Second, 10*time.Second)

	h, err := a.l.Lock(ctx, []byte("k"), cluster(10*time.Second, 10*time.Second)) // A's delegation is exclusive
	require.NoError(t, err)
	require.True(t, h.Release())
	ra, err := a.l.Lock(ctx, []byte("k"), read) // a reader from the exclusive delegation
	require.NoError(t, err)

	rb, err := b.l.Lock(ctx, []byte("k"), read)
	require.NoError(t, err, "B's reader beside A's")
	assert.False(t, ra.IsLeaseExpired(), "turning shared revoked A's live reader")
	assert.Greater(t, rb.Token(), h.Token(), "B's reader comes after A's writer")
	ra2, err := a.l.Lock(ctx, []byte("k"), read)
	require.NoError(t, err, "A's readers go on from its shared delegation")
	require.True(t, ra2.Release())

	writer := lockAsync(a, "k", cluster(10*time.Second, 20*time.Second))
	time.Sleep(100 * time.Millisecond)
	assert.False(t, admitted(writer), "A's writer waits for its own reader") // the local key
	require.True(t, ra.Release())
	require.Eventually(t, func() bool { return b.coord.Stats().RecallsReceived == 1 }, 10*time.Second, time.Millisecond,
		"A's writer recalls B's reader")
	assert.False(t, admitted(writer), "A's writer was admitted beside B's reader")
	require.True(t, rb.Release())
	wr := <-writer
	require.NoError(t, wr.err)
	assert.Greater(t, wr.h.Token(), rb.Token())
	require.True(t, wr.h.Release())
}

// A record is (column family name, key) across the cluster: the same key in two families is two
// records, and one family is one record on every node, whatever ID it has in each database.
func TestColumnFamiliesByName(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	createFamily(t, b, "padding") // B's "orders" gets another ID than A's
	ordersA, customersA := createFamily(t, a, "orders"), createFamily(t, a, "customers")
	ordersB, customersB := createFamily(t, b, "orders"), createFamily(t, b, "customers")
	require.NotEqual(t, ordersA.ID(), ordersB.ID())
	opts := cluster(10*time.Second, 5*time.Second)

	ha, err := a.l.LockCF(ctx, ordersA, []byte("7"), opts)
	require.NoError(t, err)
	hb, err := b.l.LockCF(ctx, customersB, []byte("7"), opts)
	require.NoError(t, err, "customers/7 on B while A holds orders/7")
	assert.Zero(t, b.coord.Stats().RecallsSent, "customers/7 recalled orders/7")

	_, err = b.l.LockCF(ctx, ordersB, []byte("7"), cluster(10*time.Second, 300*time.Millisecond))
	require.ErrorIs(t, err, recordlock.ErrTimeout, "orders/7 on B while A holds orders/7")
	_, err = a.l.LockCF(ctx, customersA, []byte("7"), cluster(10*time.Second, 300*time.Millisecond))
	require.ErrorIs(t, err, recordlock.ErrTimeout, "customers/7 on A while B holds customers/7")
	_, err = b.l.Lock(ctx, []byte("7"), cluster(10*time.Second, 5*time.Second))
	require.NoError(t, err, "default/7 is a third record")
	require.True(t, ha.Release())
	require.True(t, hb.Release())
}

// A Txn that holds a record shared with cluster scope and upgrades it asks for an exclusive
// round: it recalls the reader on the other node and waits for it, and its own shared admission
// does not hold it up. While it holds the record exclusive, no reader elsewhere is admitted.
func TestTxnUpgradeAcrossNodes(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	read := sharedCluster(10*time.Second, 10*time.Second)

	txn := a.l.Begin()
	t.Cleanup(txn.Rollback) // after the upgrade's goroutine has ended (testutil.Go)
	shared, err := txn.Lock(ctx, []byte("k"), read)
	require.NoError(t, err)
	rb, err := b.l.Lock(ctx, []byte("k"), read)
	require.NoError(t, err)

	upgraded := make(chan error, 1)
	testutil.Go(t, ctx, func(ctx context.Context) {
		_, err := txn.Lock(ctx, []byte("k"), cluster(10*time.Second, 10*time.Second))
		upgraded <- err
	})
	require.Eventually(t, func() bool { return b.coord.Stats().RecallsReceived == 1 }, 10*time.Second, time.Millisecond,
		"the upgrade recalls B's reader")
	select {
	case err := <-upgraded:
		t.Fatalf("the upgrade returned while B's reader held the record: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	require.True(t, rb.Release())
	require.NoError(t, <-upgraded)
	assert.False(t, shared.Shared(), "the handle is exclusive")
	assert.Greater(t, shared.Token(), rb.Token(), "the exclusive round comes after B's reader")
	_, err = b.l.TryLock([]byte("k"), sharedCluster(10*time.Second, 300*time.Millisecond))
	require.ErrorIs(t, err, recordlock.ErrTimeout, "a reader on B while A's Txn holds the record exclusive")
}

// A writer whose own Txn creates the exclusive key keeps it for its call: a reader that asks
// after the grant, and whose recall the writer's node sees before it reads its Txn's reply, is
// served after the writer.
func TestWriterGrantedBeforeALaterReader(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	w := newNode(t, e, "w", nodeConfig{})
	ctx := context.Background()
	read := sharedCluster(10*time.Second, 10*time.Second)

	hw, err := w.l.Lock(ctx, []byte("k"), read) // w holds the record shared too: a cannot hand it over
	require.NoError(t, err)
	require.True(t, hw.Release())
	ra, err := a.l.Lock(ctx, []byte("k"), read)
	require.NoError(t, err)

	wLease := w.lease(t)
	var once sync.Once
	w.reqs.setHook(func(ctx context.Context, method string, req any, invoke func() error) error {
		err := invoke()
		if method != "/etcdserverpb.KV/Txn" || err != nil {
			return err
		}
		resp, gerr := a.cli.Get(context.Background(), exclusiveKey("k"))
		if gerr == nil && len(resp.Kvs) == 1 && resp.Kvs[0].Lease == wLease {
			once.Do(func() { // the writer's grant: hold its reply until w has seen the reader's recall
				deadline := time.Now().Add(5 * time.Second)
				for w.coord.Stats().RecallsReceived == 0 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
			})
		}
		return err
	})
	writer := lockAsync(w, "k", cluster(10*time.Second, 20*time.Second))
	require.Eventually(t, func() bool { return a.coord.Stats().RecallsReceived == 1 }, 10*time.Second, time.Millisecond)
	reader := lockAsync(a, "k", read) // asks after the writer
	time.Sleep(50 * time.Millisecond)
	require.True(t, ra.Release())

	wr := <-writer
	require.NoError(t, wr.err)
	assert.False(t, admitted(reader), "a reader that asked after the writer was admitted before it")
	assert.Equal(t, uint64(1), w.coord.Stats().RecallsSent, "the writer recalled the record more than once")
	require.True(t, wr.h.Release())
	rr := <-reader
	require.NoError(t, rr.err)
	assert.Greater(t, rr.h.Token(), wr.h.Token(), "a reader's token exceeds the earlier writer's")
	require.True(t, rr.h.Release())
	w.reqs.setHook(nil)
}

// A writer to whom a holder handed the record over is admitted before a reader that asked
// after the hand-over, even when its node's watch reports the hand-over and the reader's recall
// together: the recall waits for the writer's call to be admitted.
func TestHandedOverWriterAdmittedBeforeALaterReader(t *testing.T) {
	e := startEtcd(t)
	var holding atomic.Bool
	resume := make(chan struct{})
	var once sync.Once
	// Once W's watch has applied the hand-over, its writer looks again only after the watch has
	// applied the reader's recall too: the recall must then wait for the writer, whichever of
	// W's goroutines would have run first.
	var w *node
	var recallRev atomic.Int64
	waitForRecall := func() {
		rev := recallRev.Load()
		for deadline := time.Now().Add(10 * time.Second); rev != 0 && etcdcoord.Seen(w.coord) < rev && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	w = newNode(t, e, "w", nodeConfig{opts: []etcdcoord.Option{etcdcoord.WithWatchLag(func() {
		if holding.Load() {
			<-resume
		}
	}), etcdcoord.WithChangeLag(waitForRecall)}})
	t.Cleanup(func() { once.Do(func() { close(resume) }) }) // before W closes: Close waits for the watch
	a := newNode(t, e, "a", nodeConfig{})
	r := newNode(t, e, "r", nodeConfig{})
	ctx := context.Background()
	read := sharedCluster(10*time.Second, 20*time.Second)

	ra, err := a.l.Lock(ctx, []byte("k"), read)
	require.NoError(t, err)
	writer := lockAsync(w, "k", cluster(10*time.Second, 20*time.Second))
	require.Eventually(t, func() bool { return a.coord.Stats().RecallsReceived == 1 }, 10*time.Second, time.Millisecond)
	holding.Store(true) // W's watch holds what comes next: the hand-over and the reader's recall
	require.True(t, ra.Release())
	waitForKey(t, a.cli, exclusiveKey("k")) // A handed the record over to W
	reader := lockAsync(r, "k", read)
	require.Eventually(t, func() bool {
		resp, err := a.cli.Get(ctx, recallKey("k"))
		if err != nil || len(resp.Kvs) != 1 || !strings.HasSuffix(string(resp.Kvs[0].Value), "\x00s") {
			return false
		}
		recallRev.Store(resp.Kvs[0].ModRevision)
		return true
	}, 10*time.Second, time.Millisecond, "the reader asks for the record")
	holding.Store(false)
	once.Do(func() { close(resume) })

	wr := <-writer
	require.NoError(t, wr.err)
	assert.False(t, admitted(reader), "a reader that asked after the hand-over was admitted before the writer")
	assert.Equal(t, uint64(1), w.coord.Stats().RecallsSent, "the writer asked for the record again")
	require.True(t, wr.h.Release())
	rr := <-reader
	require.NoError(t, rr.err)
	assert.Greater(t, rr.h.Token(), wr.h.Token())
	require.True(t, rr.h.Release())
}
