package etcdcoord_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/etcdcoord"
)

// A delegation this node created, which its watch adopted and saw end before the reply to the
// creating Txn was read, is not admitted from when that reply arrives: another node holds the
// key, so this node waits for it and gets a later token. (Another node's recall waits for the
// reply, so that the call is admitted first: the delegation ends here by an operator's delete.)
func TestLateCreateReplyDoesNotRevive(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{faulty: true})
	b := newNode(t, e, "b", nodeConfig{})

	created := make(chan struct{})
	reply := make(chan struct{})
	var n atomic.Int32
	a.reqs.setHook(func(ctx context.Context, method string, req any, invoke func() error) error {
		if method != "/etcdserverpb.KV/Txn" {
			return invoke()
		}
		first := n.Add(1) == 1
		err := invoke()
		if first { // A's cold Txn: it landed, and its reply is read only once A handed the key on
			close(created)
			<-reply
		}
		return err
	})
	gotA := lockAsync(a, "k", cluster(time.Second, 10*time.Second))
	<-created

	// A's watch adopts the delegation and sees an operator delete it; B then takes the key.
	require.Eventually(t, func() bool { return a.coord.Stats().Delegations == 1 }, 10*time.Second, time.Millisecond)
	_, err := b.cli.Delete(context.Background(), exclusiveKey("k"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.coord.Stats().Delegations == 0 }, 10*time.Second, time.Millisecond)
	hb, err := b.l.Lock(context.Background(), []byte("k"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	close(reply)

	r := <-gotA
	require.NoError(t, r.err)
	assert.Greater(t, r.h.Token(), hb.Token(), "the node never admits from a delegation etcd no longer has: "+
		"A must be admitted only from a delegation granted after B's")
	assert.True(t, hb.IsLeaseExpired(), "B's holder had ended when A was admitted")
	require.True(t, r.h.Release())
	hb.Release()
}

// A delegation that a cold Txn of this node replaces ends the admissions of the one it
// replaced, as one the watch sees disappear does. Two readers X and Y on A go cold together; X's
// Txn creates the delegation, an operator deletes it, and Y's Txn creates it anew, all while A's
// watch lags behind. X is revoked as soon as Y's reply is read, so that when C is admitted to
// the key, after Y, nothing of A's is live.
func TestReplacedDelegationEndsItsAdmissions(t *testing.T) {
	e := startEtcd(t)
	var lagging atomic.Bool
	resume := make(chan struct{})
	var once sync.Once
	catchUp := func() { once.Do(func() { lagging.Store(false); close(resume) }) }
	a := newNode(t, e, "a", nodeConfig{faulty: true, opts: []etcdcoord.Option{etcdcoord.WithWatchLag(func() {
		if lagging.Load() {
			<-resume
		}
	})}})
	t.Cleanup(catchUp) // before A closes: Close waits for the watch
	c := newNode(t, e, "c", nodeConfig{})
	ctx := context.Background()
	h, err := a.l.Lock(ctx, []byte("warm-up"), cluster(time.Second, 10*time.Second)) // A's watch is up
	require.NoError(t, err)
	require.True(t, h.Release())

	// Hold both readers' cold Txns until each is let through.
	entered := make(chan struct{}, 2)
	gates := []chan struct{}{make(chan struct{}), make(chan struct{})}
	var txns atomic.Int32
	a.reqs.setHook(func(ctx context.Context, method string, req any, invoke func() error) error {
		if method != txnMethod {
			return invoke()
		}
		if i := txns.Add(1) - 1; i < 2 {
			entered <- struct{}{}
			<-gates[i]
		}
		return invoke()
	})
	lagging.Store(true)
	readers := []chan lockResult{
		lockAsync(a, "k", sharedCluster(10*time.Second, 10*time.Second)),
		lockAsync(a, "k", sharedCluster(10*time.Second, 10*time.Second)),
	}
	<-entered
	<-entered // both readers went cold: A had no delegation of the key

	close(gates[0])
	var x, y *recordlock.Handle
	select { // the first Txn created the delegation: its reader is X
	case r := <-readers[0]:
		require.NoError(t, r.err)
		x, readers = r.h, readers[1:]
	case r := <-readers[1]:
		require.NoError(t, r.err)
		x, readers = r.h, readers[:1]
	}
	_, err = c.cli.Delete(ctx, sharedKey("k", a.lease(t))) // the operator's delete
	require.NoError(t, err)
	close(gates[1])
	r := <-readers[0]
	require.NoError(t, r.err)
	y = r.h
	require.Greater(t, y.Token(), x.Token(), "Y was admitted from the delegation its Txn created")
	select {
	case <-x.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("X, admitted from the replaced delegation, was not revoked")
	}
	assert.Equal(t, uint64(1), a.coord.Stats().Lost, "the replaced delegation was lost")

	catchUp()
	require.True(t, y.Release())
	hc, err := c.l.Lock(ctx, []byte("k"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	assert.True(t, x.IsLeaseExpired(), "C admitted while X was live")
	assert.Greater(t, hc.Token(), y.Token())
	require.True(t, hc.Release())
	x.Release()
}
