package etcdcoord_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A delegation this node created, which its watch adopted and which it handed on to another
// node before the reply to the creating Txn was read, is not admitted from when that reply
// arrives: the other node holds the key, so this node waits for it and gets a later token.
func TestLateCreateReplyDoesNotRevive(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
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

	// A's watch adopts the delegation, B's recall arrives, and A, admitting nothing from it,
	// hands it to B at once.
	hb, err := b.l.Lock(context.Background(), []byte("k"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.coord.Stats().HandBacks == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Zero(t, a.coord.Stats().Delegations)
	close(reply)

	r := <-gotA
	require.NoError(t, r.err)
	assert.Greater(t, r.h.Token(), hb.Token(), "A admitted only from a delegation granted after B's")
	assert.True(t, hb.IsLeaseExpired(), "B's holder had ended when A was admitted")
	require.True(t, r.h.Release())
	hb.Release()
}
