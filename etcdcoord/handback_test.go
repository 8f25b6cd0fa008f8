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

// A hand-back runs in the coordinator's background: a Release that lets a recalled key's
// hand-back go on never waits for etcd, so a Locker Close or a Txn Commit that releases many
// keys other nodes wait for does not wait the request timeout once per key, or at all.

// askFor makes b ask for each key, which a holds, and returns once a has seen every recall. The
// channels give b's locks.
func askFor(t *testing.T, a, b *node, keys ...string) []chan lockResult {
	t.Helper()
	recalls := a.coord.Stats().RecallsReceived
	var got []chan lockResult
	for _, k := range keys {
		got = append(got, lockAsync(b, k, cluster(time.Second, 60*time.Second)))
	}
	require.Eventually(t, func() bool { return a.coord.Stats().RecallsReceived == recalls+uint64(len(keys)) },
		20*time.Second, time.Millisecond, "A never saw B's recalls")
	return got
}

// admitAll requires each of b's locks to be admitted, and releases it.
func admitAll(t *testing.T, got []chan lockResult) {
	t.Helper()
	for i, ch := range got {
		r := <-ch
		require.NoError(t, r.err, "B's lock %d once A's hand-back lands", i)
		require.True(t, r.h.Release())
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

// Closing a Locker that holds several keys another node waits for releases each, and each
// release lets its key's hand-back go on; with etcd not answering, Close returns instead of
// waiting the request timeout (a minute here) once per key. The keys go over once etcd answers.
func TestLockerCloseDoesNotWaitForEtcd(t *testing.T) {
	e := startEtcd(t)
	slow := []etcdcoord.Option{etcdcoord.WithRequestTimeout(time.Minute)}
	a, b := newNode(t, e, "a", nodeConfig{opts: slow}), newNode(t, e, "b", nodeConfig{})
	keys := []string{"k0", "k1", "k2", "k3"}
	for _, k := range keys {
		_, err := a.l.Lock(context.Background(), []byte(k), cluster(10*time.Second, 10*time.Second))
		require.NoError(t, err)
	}
	got := askFor(t, a, b, keys...)
	answer := make(chan struct{})
	holdTxns(a, answer)
	done, ok := returnsWithin(20*time.Second, func() { _ = a.l.Close() })
	if !ok {
		close(answer) // lets the old behaviour finish, so the test ends
		<-done
		admitAll(t, got)
		t.Fatal("Locker.Close waited for etcd to confirm the hand-backs")
	}
	close(answer)
	admitAll(t, got)
}

// A Txn's Commit releases its last key inside the fences of the others; with another node
// waiting for its keys, that release lets the hand-back go on without waiting for etcd, so
// Commit returns, and no fence is held, while etcd does not answer.
func TestCommitDoesNotWaitForEtcd(t *testing.T) {
	e := startEtcd(t)
	slow := []etcdcoord.Option{etcdcoord.WithRequestTimeout(time.Minute)}
	a, b := newNode(t, e, "a", nodeConfig{opts: slow}), newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	tx := a.l.Begin()
	for _, k := range []string{"k1", "k2"} {
		_, err := tx.Lock(ctx, []byte(k), cluster(10*time.Second, 10*time.Second))
		require.NoError(t, err)
		require.NoError(t, tx.Put([]byte(k), []byte("a")))
	}
	got := askFor(t, a, b, "k1", "k2")
	answer := make(chan struct{})
	holdTxns(a, answer)
	var err error
	done, ok := returnsWithin(20*time.Second, func() { err = tx.Commit() })
	if !ok {
		close(answer)
		<-done
		admitAll(t, got)
		t.Fatal("Commit waited for etcd to confirm a hand-back")
	}
	require.NoError(t, err)
	close(answer)
	admitAll(t, got)
}

// A release that lets the hand-back go on, run inside a Fence of a handle of the same key,
// must not revoke that handle in its own goroutine: the revocation waits for the Fence. B asks
// for the key while h1's Fence runs; the Fence releases h2, the last holder, and Close runs
// just after that release let the hand-back go on (WithHandBackLag). The Fence still returns:
// the hand-back is the coordinator's goroutine, which Close waits for, and the release sends
// nothing itself.
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
	ctx := context.Background()
	h1, err := a.l.Lock(ctx, []byte("k"), sharedCluster(10*time.Second, 10*time.Second))
	require.NoError(t, err)
	h2, err := a.l.Lock(ctx, []byte("k"), sharedCluster(10*time.Second, 10*time.Second))
	require.NoError(t, err)
	require.True(t, h1.Release())

	lagging.Store(true)
	entered, asked := make(chan struct{}), make(chan struct{})
	fenced := make(chan error, 1)
	go func() {
		fenced <- h1.Fence(func() error {
			close(entered)
			<-asked
			h2.Release() // the last holder: lets the hand-back go on
			return nil
		})
	}()
	<-entered
	got := askFor(t, a, b, "k")
	close(asked)
	select {
	case err := <-fenced:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the Fence never returned: its own release revoked its handle and waited for it")
	}
	require.NoError(t, <-closed)
	admitAll(t, got)
}

// A released handle's Fence in flight holds the hand-back of its key, after its last sharer
// released and nobody waited, once another node asks: but no longer than the node trusts its
// etcd lease; then the node gives up and hands the key over, and the asker is admitted.
func TestReleaseHandBackIsBoundedByLease(t *testing.T) {
	e := startEtcd(t)
	clk := recordlock.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	a, b := newNode(t, e, "a", nodeConfig{clock: clk}), newNode(t, e, "b", nodeConfig{})
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
	require.True(t, h2.Release()) // nobody waits: A keeps the key
	assert.Equal(t, 1, a.coord.Stats().Delegations)

	got := lockAsync(b, "k", cluster(time.Second, 30*time.Second))
	require.Eventually(t, func() bool { return a.coord.Stats().RecallsReceived == 1 }, 10*time.Second, time.Millisecond) // the hand-back waits for h1's Fence
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
