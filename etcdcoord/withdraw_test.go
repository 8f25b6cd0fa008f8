package etcdcoord_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// A cold request whose reply is lost after it wrote the recall key does not leave the key
// behind, even when the first withdrawals fail too: the holder can lock its key again, and so
// can the asker.
func TestUnknownOutcomeWithdrawsRecall(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	rkey := recallKey("k")

	ha, err := a.l.Lock(ctx, []byte("k"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err)

	var lost, failedWithdrawals atomic.Int32
	b.reqs.setHook(func(ctx context.Context, method string, req any, invoke func() error) error {
		switch {
		case method != "/etcdserverpb.KV/Txn":
		case isWithdraw(req) && failedWithdrawals.Add(1) <= 4:
			return errLostReply // never sent
		case !isWithdraw(req) && lost.Add(1) == 1:
			if err := invoke(); err != nil {
				return err
			}
			return errLostReply // sent and landed, but the reply is gone
		}
		return invoke()
	})
	_, err = b.l.Lock(ctx, []byte("k"), cluster(time.Second, 5*time.Second))
	require.ErrorIs(t, err, recordlock.ErrClusterUnavailable)
	waitForKey(t, b.cli, rkey) // the lost request did write the recall
	waitForDelete(t, b.cli, rkey)
	assert.Greater(t, failedWithdrawals.Load(), int32(4), "a recall of unknown outcome is withdrawn, with retries past failures")
	b.reqs.setHook(nil)

	// The recall that did reach A hands the key back once A releases; both nodes can lock it.
	require.True(t, ha.Release())
	for _, n := range []*node{a, b, a} {
		h, err := n.l.Lock(ctx, []byte("k"), cluster(time.Second, 5*time.Second))
		require.NoError(t, err, n.name)
		require.True(t, h.Release())
	}
}

// An asker whose wait runs out withdraws its recall at once, so the holder keeps re-locking
// its key without waiting for the asker's etcd lease to expire.
func TestTimedOutAskerLeavesNoRecall(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	ha, err := a.l.Lock(ctx, []byte("k"), cluster(5*time.Second, 10*time.Second))
	require.NoError(t, err)
	_, err = b.l.Lock(ctx, []byte("k"), cluster(time.Second, 200*time.Millisecond))
	require.ErrorIs(t, err, recordlock.ErrTimeout)
	waitForDelete(t, b.cli, recallKey("k"))
	require.True(t, ha.Release())
	h, err := a.l.Lock(ctx, []byte("k"), cluster(time.Second, 5*time.Second))
	require.NoError(t, err)
	require.True(t, h.Release())
}
