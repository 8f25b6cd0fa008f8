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

// A contended key's hand-back on release runs in the coordinator's background, and a Release
// waits for etcd's confirmation at most a short bound, and not at all once such a wait has run
// out and no hand-back has been confirmed since: a Locker Close or a Txn Commit that releases
// many keys does not wait the request timeout once per key, or at all, for etcd.

// contend makes a and b take turns on each key, A, B, A, B: each node has held the key, and
// another node held it after that, so each hands it back on release, and B's release has. It
// returns once the keys are free in etcd.
func contend(t *testing.T, a, b *node, keys ...string) {
	t.Helper()
	ctx := context.Background()
	for _, k := range keys {
		for _, n := range []*node{a, b, a, b} {
			h, err := n.l.Lock(ctx, []byte(k), cluster(time.Second, 10*time.Second))
			require.NoError(t, err)
			require.True(t, h.Release())
		}
		waitForDelete(t, a.cli, "/recordlock/d/"+encode(k))
	}
}

// holdTxns makes n's Txns wait, from now on, until release is closed or the request's context
// ends: etcd's answer to a hand-back does not arrive.
func holdTxns(n *node, release <-chan struct{}) {
	n.reqs.setHook(func(ctx context.Context, method string, req any, invoke func() error) error {
		if method == txnMethod {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return invoke()
	})
}

// returnsWithin reports whether f returns within d. The bound is generous: what it tells apart
// is returning while etcd withholds its answer from returning only once the request times out.
func returnsWithin(d time.Duration, f func()) (chan struct{}, bool) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return done, true
	case <-time.After(d):
		return done, false
	}
}

// Closing a Locker that holds several contended keys releases each, and each release hands its
// key back; with etcd not answering, Close returns after one short wait instead of waiting the
// request timeout (a minute here) once per key. The keys go back once etcd answers.
func TestLockerCloseDoesNotWaitForEtcd(t *testing.T) {
	e := startEtcd(t)
	slow := []etcdcoord.Option{etcdcoord.WithRequestTimeout(time.Minute)}
	a, b := newNode(t, e, "a", nodeConfig{opts: slow}), newNode(t, e, "b", nodeConfig{})
	keys := []string{"k0", "k1", "k2", "k3"}
	contend(t, a, b, keys...)
	for _, k := range keys {
		_, err := a.l.Lock(context.Background(), []byte(k), cluster(10*time.Second, 10*time.Second))
		require.NoError(t, err)
	}
	answer := make(chan struct{})
	holdTxns(a, answer)
	done, ok := returnsWithin(20*time.Second, func() { _ = a.l.Close() })
	if !ok {
		close(answer) // lets the old behaviour finish, so the test ends
		<-done
		t.Fatal("Locker.Close waited for etcd to confirm the hand-backs")
	}
	close(answer)
	for _, k := range keys {
		h, err := b.l.Lock(context.Background(), []byte(k), cluster(time.Second, 10*time.Second))
		require.NoError(t, err, "B locks %s once A's hand-back lands", k)
		require.True(t, h.Release())
	}
}

// A Txn's Commit releases its last key inside the fences of the others; that release hands the
// key back waiting for etcd only briefly, so Commit returns, and no fence is held, while etcd
// does not answer.
func TestCommitDoesNotWaitForEtcd(t *testing.T) {
	e := startEtcd(t)
	slow := []etcdcoord.Option{etcdcoord.WithRequestTimeout(time.Minute)}
	a, b := newNode(t, e, "a", nodeConfig{opts: slow}), newNode(t, e, "b", nodeConfig{})
	contend(t, a, b, "k1", "k2")
	ctx := context.Background()
	tx := a.l.Begin()
	for _, k := range []string{"k1", "k2"} {
		_, err := tx.Lock(ctx, []byte(k), cluster(10*time.Second, 10*time.Second))
		require.NoError(t, err)
		require.NoError(t, tx.Put([]byte(k), []byte("a")))
	}
	answer := make(chan struct{})
	holdTxns(a, answer)
	var err error
	done, ok := returnsWithin(20*time.Second, func() { err = tx.Commit() })
	if !ok {
		close(answer)
		<-done
		t.Fatal("Commit waited for etcd to confirm a hand-back")
	}
	require.NoError(t, err)
	close(answer)
	for _, k := range []string{"k1", "k2"} {
		h, err := b.l.Lock(ctx, []byte(k), cluster(time.Second, 10*time.Second))
		require.NoError(t, err, "B locks %s once A's hand-back lands", k)
		require.True(t, h.Release())
	}
}

// A release that hands the key back, run inside a Fence of a handle of the same key, must not
// revoke that handle in its own goroutine: the revocation waits for the Fence. Close runs just
// after the release started the hand-back (WithHandBackLag), and the Fence still returns: the
// hand-back is the coordinator's goroutine, which Close waits for, and the release's own wait
// for it is bounded.
func TestReleaseInsideFenceRacingCloseDoesNotDeadlock(t *testing.T) {
	e := startEtcd(t)
	var lagging atomic.Bool
	closed := make(chan error, 1)
	var a *node
	lag := etcdcoord.WithHandBackLag(func() {
		if !lagging.CompareAndSwap(true, false) {
			return
		}
		go func() { closed <- a.coord.Close() }()
		assert.Eventually(t, func() bool { return etcdcoord.Closed(a.coord) }, 10*time.Second, 100*time.Microsecond)
	})
	a = newNode(t, e, "a", nodeConfig{opts: []etcdcoord.Option{lag}})
	b := newNode(t, e, "b", nodeConfig{})
	contend(t, a, b, "k")
	ctx := context.Background()
	h1, err := a.l.Lock(ctx, []byte("k"), sharedCluster(10*time.Second, 10*time.Second))
	require.NoError(t, err)
	h2, err := a.l.Lock(ctx, []byte("k"), sharedCluster(10*time.Second, 10*time.Second))
	require.NoError(t, err)
	require.True(t, h1.Release())

	lagging.Store(true)
	var fenceErr error
	_, ok := returnsWithin(20*time.Second, func() {
		fenceErr = h1.Fence(func() error {
			h2.Release() // the last holder: hands the key back
			return nil
		})
	})
	require.True(t, ok, "the Fence never returned: its own release revoked its handle and waited for it")
	require.NoError(t, fenceErr)
	require.NoError(t, <-closed)
}

// The hand-back on release waits for a Fence in flight, as a recall does, but no longer than
// the node trusts its etcd lease: then it gives up and hands the key back, and the node that
// asked for it meanwhile is admitted.
func TestReleaseHandBackIsBoundedByLease(t *testing.T) {
	e := startEtcd(t)
	clk := recordlock.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	a, b := newNode(t, e, "a", nodeConfig{clock: clk}), newNode(t, e, "b", nodeConfig{})
	contend(t, a, b, "k")
	ctx := context.Background()
	h1, err := a.l.Lock(ctx, []byte("k"), sharedCluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	h2, err := a.l.Lock(ctx, []byte("k"), sharedCluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	require.True(t, h1.Release())
	entered, finish := make(chan struct{}), make(chan struct{})
	fenced := make(chan error, 1)
	go func() { fenced <- h1.Fence(func() error { close(entered); <-finish; return nil }) }()
	defer func() { close(finish); <-fenced }()
	<-entered
	require.True(t, h2.Release()) // the hand-back starts and waits for h1's Fence

	got := lockAsync(b, "k", cluster(time.Second, 30*time.Second))
	waitForKey(t, a.cli, "/recordlock/r/"+encode("k")) // B has asked for the key
	assert.False(t, admitted(got), "B was admitted while A's Fence ran within A's lease")
	clk.Advance(etcdcoord.DefaultTTL) // past what A trusts of its etcd lease
	require.Eventually(t, func() bool {
		clk.Advance(0) // fires a timer armed after the Advance above
		return admitted(got)
	}, 20*time.Second, 10*time.Millisecond, "the hand-back still waits for the Fence past A's lease")
	r := <-got
	require.NoError(t, r.err)
	assert.Greater(t, r.h.Token(), h2.Token())
	require.True(t, r.h.Release())
}
