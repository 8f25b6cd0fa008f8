package etcdcoord_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/etcdcoord"
)

// The cold path never adopts a delegation the node has seen end. On A, whose watch is
// held, reader X's cold Txn creates the shared delegation of k, and reader Y's, beside X on the
// local key, reads it before A knows it: its reply is held. X is admitted from it and
// releases; A hands the idle delegation back and B creates its own. When Y's reply finally says
// that A's delegation exists, A must not adopt it: Y would be admitted with the old token while
// B holds the key.
func TestLateColdReadDoesNotReadoptEndedDelegation(t *testing.T) {
	e := startEtcd(t)
	b := newNode(t, e, "b", nodeConfig{}) // first: A's watch sees no registration
	clock := recordlock.NewManualClock(time.Unix(1, 0))
	gate := newWatchGate()
	a := newNode(t, e, "a", nodeConfig{clock: clock, opts: []etcdcoord.Option{
		etcdcoord.WithLinger(time.Second), etcdcoord.WithWatchLag(gate.lag)}})
	t.Cleanup(gate.release) // before A closes: Close waits for the watch
	ctx := context.Background()

	// The first two cold Txns of k on A land, and their replies wait until the test lets each go.
	dkey := []byte(exclusiveKey("k"))
	landed := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	reply := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var cold atomic.Int32
	a.reqs.setHook(func(ctx context.Context, method string, req any, invoke func() error) error {
		txn, ok := req.(*etcdserverpb.TxnRequest)
		if !ok || len(txn.Compare) == 0 || txn.Compare[0].Target != etcdserverpb.Compare_CREATE ||
			!bytes.Equal(txn.Compare[0].Key, dkey) {
			return invoke()
		}
		i := cold.Add(1) - 1
		err := invoke()
		if i < 2 {
			close(landed[i])
			<-reply[i]
		}
		return err
	})
	t.Cleanup(func() { a.reqs.setHook(nil) })
	read := sharedCluster(500*time.Millisecond, 10*time.Second)
	gotX := lockAsync(a, "k", read)
	<-landed[0] // X's Txn created the delegation
	gotY := lockAsync(a, "k", read)
	<-landed[1] // Y's Txn read it, on A's lease
	close(reply[0])
	x := <-gotX
	require.NoError(t, x.err)
	require.True(t, x.h.Release())

	clock.Advance(2 * time.Second)                                                       // A's delegation lingered idle
	hz, err := a.l.Lock(ctx, []byte("z"), cluster(500*time.Millisecond, 10*time.Second)) // sweeps k
	require.NoError(t, err)
	require.True(t, hz.Release())
	require.Eventually(t, func() bool { return a.coord.Stats().HandBacks == 1 }, 10*time.Second, time.Millisecond,
		"A did not hand the idle key back")
	hb, err := b.l.Lock(ctx, []byte("k"), cluster(30*time.Second, 10*time.Second))
	require.NoError(t, err)

	close(reply[1]) // Y reads that A's delegation exists: A has seen it end
	for {
		select {
		case y := <-gotY:
			if y.err == nil {
				y.h.Release()
			}
			t.Fatalf("a delegation the node has seen end is never adopted again, but Y returned "+
				"(token %d, err %v) while B holds the key with token %d", tokenOf(y.h), y.err, hb.Token())
		case <-time.After(time.Millisecond):
		}
		if b.coord.Stats().RecallsReceived == 1 { // Y asks B for the key, as it must
			break
		}
	}
	gate.release() // A's watch reports the hand-back, B's grant and B's hand-over to Y
	require.True(t, hb.Release())
	var y lockResult
	select {
	case y = <-gotY:
	case <-time.After(20 * time.Second):
		t.Fatal("B's hand-over did not reach Y")
	}
	require.NoError(t, y.err)
	assert.Greater(t, y.h.Token(), hb.Token())
	require.True(t, y.h.Release())
}

func tokenOf(h *recordlock.Handle) uint64 {
	if h == nil {
		return 0
	}
	return h.Token()
}
