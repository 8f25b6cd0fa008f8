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

// A watch that restarts reads the prefix afresh, and that read may be older than what the node
// has done since it was sent: a delegation the node has handed back in between is in it. The
// node must not adopt it again: A's read is held while A hands its idle delegation
// of k back and B creates its own; then the read says A's delegation exists, and the events
// after it are held. A TryLock of k on A must not be admitted with the old token.
func TestLateResyncDoesNotReadoptEndedDelegation(t *testing.T) {
	e := startEtcd(t)
	b := newNode(t, e, "b", nodeConfig{})
	p := newProxy(t, e.Clients[0].Addr().String(), false)
	clock := recordlock.NewManualClock(time.Unix(1, 0))
	var holdWatch atomic.Bool
	var applied atomic.Int32
	watchHeld := make(chan struct{})
	letWatchGo := sync.OnceFunc(func() { close(watchHeld) })
	a := newNode(t, e, "a", nodeConfig{clock: clock, endpoints: []string{p.addr()}, opts: []etcdcoord.Option{
		etcdcoord.WithLinger(time.Second), etcdcoord.WithWatchLag(func() {
			applied.Add(1)
			if holdWatch.Load() {
				<-watchHeld
			}
		})}})
	t.Cleanup(letWatchGo) // before A closes: Close waits for the watch
	ctx := context.Background()

	ha, err := a.l.Lock(ctx, []byte("k"), cluster(500*time.Millisecond, 10*time.Second))
	require.NoError(t, err)
	require.True(t, ha.Release())
	require.Eventually(t, func() bool { return applied.Load() >= 1 }, 10*time.Second, time.Millisecond,
		"A's watch did not report its grant")

	// The watch breaks; the read it restarts with lands, and its reply is held.
	var holdRead atomic.Bool
	holdRead.Store(true)
	read, reply := make(chan struct{}), make(chan struct{})
	letReadGo := sync.OnceFunc(func() { close(reply) })
	t.Cleanup(letReadGo)
	a.reqs.setHook(func(ctx context.Context, method string, req any, invoke func() error) error {
		err := invoke()
		if method == "/etcdserverpb.KV/Range" && err == nil && holdRead.CompareAndSwap(true, false) {
			close(read)
			<-reply
		}
		return err
	})
	restarts := a.coord.Stats().WatchRestarts
	p.cut()
	require.Eventually(t, func() bool { return a.coord.Stats().WatchRestarts > restarts }, 10*time.Second, time.Millisecond,
		"A's watch did not break")
	p.heal()
	<-read

	clock.Advance(2 * time.Second) // A's delegation of k lingered idle
	gotZ := lockAsync(a, "z", cluster(500*time.Millisecond, 10*time.Second))
	require.Eventually(t, func() bool { return a.coord.Stats().HandBacks == 1 }, 10*time.Second, time.Millisecond,
		"A did not hand the idle key back")
	hb, err := b.l.Lock(ctx, []byte("k"), cluster(30*time.Second, 10*time.Second))
	require.NoError(t, err)

	holdWatch.Store(true) // A learns nothing of the hand-back or of B's grant from its watch
	letReadGo()
	z := awaitOnClock(t, clock, gotZ) // A's watch is up again
	require.NoError(t, z.err)
	require.True(t, z.h.Release())
	r := awaitOnClock(t, clock, tryLockAsync(a, "k", cluster(time.Second, 200*time.Millisecond)))
	if r.err == nil {
		r.h.Release()
		t.Fatalf("a delegation the node has seen end is never adopted again, but after its watch "+
			"restarted A was admitted with token %d while B holds the key with token %d", r.h.Token(), hb.Token())
	}
	assert.ErrorIs(t, r.err, recordlock.ErrLocked)
	letWatchGo()
	require.True(t, hb.Release())
}

// tryLockAsync starts a TryLock on n and returns where its result arrives.
func tryLockAsync(n *node, key string, opts recordlock.Options) chan lockResult {
	got := make(chan lockResult, 1)
	go func() {
		h, err := n.l.TryLock([]byte(key), opts)
		got <- lockResult{h, err}
	}()
	return got
}
