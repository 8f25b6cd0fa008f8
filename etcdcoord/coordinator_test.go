package etcdcoord_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
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

// Three nodes contend for four keys from eight goroutines each. Invariant: at most one
// authorized holder per key at a time (the occupancy counter, checked inside the fence, never
// passes one), and no lost update (a counter kept in etcd, read then written inside the fence,
// ends at the number of fenced increments).
func TestMutualExclusionAcrossNodes(t *testing.T) {
	e := startEtcd(t)
	nodes := make([]*node, 3)
	for i := range nodes {
		nodes[i] = newNode(t, e, fmt.Sprintf("node-%d", i), nodeConfig{})
	}
	keys := []string{"k0", "k1", "k2", "k3"}
	const goroutines, rounds = 8, 2 // each goroutine increments every key rounds times
	var (
		occupancy [4]atomic.Int32
		maxOcc    atomic.Int32
		checks    atomic.Int64
		revoked   atomic.Int64
		done      [4]atomic.Int64
	)
	counter := func(i int) string { return "counter/" + keys[i] }

	var wg sync.WaitGroup
	for _, n := range nodes {
		for g := range goroutines {
			wg.Go(func() {
				for r := range rounds * len(keys) {
					i := (g + r) % len(keys)
					for {
						h, err := n.l.Lock(context.Background(), []byte(keys[i]), cluster(5*time.Second, 30*time.Second))
						if !assert.NoError(t, err) {
							return
						}
						err = h.Fence(func() error {
							occ := occupancy[i].Add(1)
							defer occupancy[i].Add(-1)
							checks.Add(1)
							for m := maxOcc.Load(); occ > m && !maxOcc.CompareAndSwap(m, occ); m = maxOcc.Load() {
							}
							ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
							defer cancel()
							resp, err := n.cli.Get(ctx, counter(i))
							if err != nil {
								return err
							}
							v := 0
							if len(resp.Kvs) == 1 {
								v, _ = strconv.Atoi(string(resp.Kvs[0].Value))
							}
							_, err = n.cli.Put(ctx, counter(i), strconv.Itoa(v+1))
							return err
						})
						h.Release()
						if errors.Is(err, recordlock.ErrLeaseExpired) {
							revoked.Add(1) // recalled before its fence began: nothing was written
							continue
						}
						if !assert.NoError(t, err) {
							return
						}
						done[i].Add(1)
						break
					}
				}
			})
		}
	}
	wg.Wait()

	assert.LessOrEqual(t, maxOcc.Load(), int32(1), "authorized holders of one key at once")
	for i := range keys {
		resp, err := nodes[0].cli.Get(context.Background(), counter(i))
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1)
		assert.Equal(t, strconv.Itoa(int(done[i].Load())), string(resp.Kvs[0].Value), "counter of %s", keys[i])
		assert.Equal(t, int64(len(nodes)*goroutines*rounds), done[i].Load())
	}
	t.Logf("%d fenced critical sections checked, %d holders recalled before their fence", checks.Load(), revoked.Load())
}

// 26 locks of one key from one node within one delegation cost exactly one etcd request: the Txn
// that created the delegation.
func TestRepeatLocksCostOneRequest(t *testing.T) {
	e := startEtcd(t)
	n := newNode(t, e, "a", nodeConfig{})
	ctx := context.Background()
	opts := cluster(time.Second, 10*time.Second)

	// The node's etcd lease and recall watch are set up once per node, not per key.
	h, err := n.l.Lock(ctx, []byte("warm-up"), opts)
	require.NoError(t, err)
	require.True(t, h.Release())

	before := n.reqs.snapshot()
	var token uint64
	for i := range 26 {
		h, err := n.l.Lock(ctx, []byte("k"), opts)
		require.NoError(t, err)
		require.Equal(t, recordlock.ScopeCluster, h.Scope())
		if i == 0 {
			token = h.Token()
		}
		assert.Equal(t, token, h.Token(), "one delegation, one token")
		require.True(t, h.Release())
	}
	assert.Equal(t, map[string]int{"/etcdserverpb.KV/Txn": 1}, n.reqs.since(before))
}

// Handoff: a live admission on A blocks B until A's holder is revoked, and a fenced write in
// flight lands before B is admitted; a write A staged and then released is fenced once B's
// recall revokes it.
func TestHandoffRevokesAndFences(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	opts := cluster(10*time.Second, 20*time.Second)

	t.Run("a fenced write in flight lands before the handoff", func(t *testing.T) {
		ha, err := a.l.Lock(ctx, []byte("k"), opts)
		require.NoError(t, err)
		type result struct {
			h   *recordlock.Handle
			err error
		}
		got := make(chan result, 1)
		go func() {
			h, err := b.l.Lock(ctx, []byte("k"), opts)
			got <- result{h, err}
		}()
		err = ha.Fence(func() error {
			waitForKey(t, a.cli, recallKey("k")) // B has asked for the key back
			time.Sleep(100 * time.Millisecond)   // room for a wrong handoff to happen
			select {
			case r := <-got:
				got <- r
				t.Error("B was admitted while A's fenced write was in flight")
			default:
			}
			_, err := a.cli.Put(ctx, "value/k", "a")
			return err
		})
		require.NoError(t, err)
		r := <-got
		require.NoError(t, r.err)
		assert.True(t, ha.IsLeaseExpired(), "A's holder was revoked")
		resp, err := b.cli.Get(ctx, "value/k")
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1)
		assert.Equal(t, "a", string(resp.Kvs[0].Value), "A's fenced write landed before B was admitted")
		assert.Greater(t, r.h.Token(), ha.Token())
		require.True(t, r.h.Release())
	})

	t.Run("a write staged before Release is fenced by the recall", func(t *testing.T) {
		ha, err := a.l.Lock(ctx, []byte("j"), opts)
		require.NoError(t, err)
		commit := func() error { _, err := a.cli.Put(ctx, "value/j", "staged by a"); return err }
		require.True(t, ha.Release())
		require.False(t, ha.IsLeaseExpired(), "a released handle still authorizes its staged write")

		// Well within A's 10 s lease: the recall revokes a released admission at once.
		hb, err := b.l.Lock(ctx, []byte("j"), cluster(10*time.Second, 3*time.Second))
		require.NoError(t, err, "a recall revokes admissions already released, without waiting for their lease")
		assert.True(t, ha.IsLeaseExpired(), "B's recall revoked A's released handle")
		require.ErrorIs(t, ha.Fence(commit), recordlock.ErrLeaseExpired)
		resp, err := b.cli.Get(ctx, "value/j")
		require.NoError(t, err)
		assert.Empty(t, resp.Kvs, "the staged write must not land")
		require.True(t, hb.Release())
	})

	// The recall revokes A's released handle, and that revocation waits for the Fence the handle
	// runs: A sends no hand-back while the commit runs, and B, asking meanwhile, times out.
	t.Run("a fence on a released handle holds the hand-off", func(t *testing.T) {
		ha, err := a.l.Lock(ctx, []byte("i"), opts)
		require.NoError(t, err)
		require.True(t, ha.Release())
		handedBack := watchHandBacks(t, a, "i")
		entered, finish := make(chan struct{}), make(chan struct{})
		fenced := make(chan error, 1)
		go func() {
			fenced <- ha.Fence(func() error { close(entered); <-finish; return nil })
		}()
		<-entered
		r := lockUntil(b, "i", cluster(time.Second, 2*time.Second), handedBack)
		close(finish)
		select {
		case <-handedBack:
			t.Fatal("A handed the key over before the revocation of its released admission, and the Fence it waits for, returned")
		default:
		}
		require.ErrorIs(t, r.err, recordlock.ErrTimeout, "B was admitted while A's released handle ran its Fence")
		require.NoError(t, <-fenced, "the fence began before the recall, so its write stands")

		hb, err := b.l.Lock(ctx, []byte("i"), opts)
		require.NoError(t, err)
		assert.True(t, ha.IsLeaseExpired(), "B's recall revoked A's released handle")
		require.True(t, hb.Release())
	})
}

// An asker whose budget runs out while the holder drains fails with ErrTimeout, gives its local
// key back and withdraws its recall; the handoff it started still completes.
func TestAskerTimesOut(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	ha, err := a.l.Lock(ctx, []byte("k"), cluster(10*time.Second, 10*time.Second))
	require.NoError(t, err)

	entered, finish := make(chan struct{}), make(chan struct{})
	fenced := make(chan error, 1)
	go func() { // A's revoke will wait for this commit
		fenced <- ha.Fence(func() error { close(entered); <-finish; return nil })
	}()
	<-entered

	_, err = b.l.Lock(ctx, []byte("k"), cluster(time.Second, 300*time.Millisecond))
	require.ErrorIs(t, err, recordlock.ErrTimeout)
	assert.NotErrorIs(t, err, recordlock.ErrClusterUnavailable)
	h, err := b.l.TryLock([]byte("k"), recordlock.Options{Scope: recordlock.ScopeNode})
	require.NoError(t, err, "B's local key was given back")
	require.True(t, h.Release())
	waitForDelete(t, b.cli, recallKey("k"))

	close(finish)
	require.NoError(t, <-fenced, "the fence began before the recall, so its write stands")
	waitForDelete(t, b.cli, exclusiveKey("k")) // A handed the key back
	assert.True(t, ha.IsLeaseExpired())
	hb, err := b.l.Lock(ctx, []byte("k"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	require.True(t, hb.Release())
}

// With the etcd server stopped, every cluster lock that needs etcd fails closed, with
// ErrClusterUnavailable within its wait budget, never as a node-local lock.
func TestEtcdDownFailsClosed(t *testing.T) {
	e := startEtcd(t)
	fast := nodeConfig{opts: []etcdcoord.Option{etcdcoord.WithRequestTimeout(300 * time.Millisecond)}}
	warm := newNode(t, e, "warm", fast) // has its lease and watch
	h, err := warm.l.Lock(context.Background(), []byte("warm-up"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	require.True(t, h.Release())
	fresh := newNode(t, e, "fresh", fast) // has its lease but has never locked

	e.stop()

	const budget = 300 * time.Millisecond
	for _, n := range []*node{warm, fresh} {
		for i, try := range []bool{false, true} {
			key := []byte(fmt.Sprintf("cold-%d", i))
			start := time.Now()
			var h *recordlock.Handle
			var err error
			if try {
				h, err = n.l.TryLock(key, cluster(time.Second, budget))
			} else {
				h, err = n.l.Lock(context.Background(), key, cluster(time.Second, budget))
			}
			elapsed := time.Since(start)
			assert.Nil(t, h)
			require.ErrorIs(t, err, recordlock.ErrClusterUnavailable, "%s try=%v", n.name, try)
			assert.NotErrorIs(t, err, recordlock.ErrTimeout)
			assert.Less(t, elapsed, budget+5*time.Second, "returned within its budget")
			// Failing closed gave the local key back.
			h, err = n.l.TryLock(key, recordlock.Options{Scope: recordlock.ScopeNode})
			require.NoError(t, err)
			require.True(t, h.Release())
		}
	}
}

// A node that dies holding a delegation blocks the key only until its etcd lease expires, and
// its holder's lease has ended by the time another node is admitted.
func TestDeadNodeDelegationExpires(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{opts: []etcdcoord.Option{
		etcdcoord.WithTTL(2 * time.Second), etcdcoord.WithSkew(500 * time.Millisecond),
	}})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()

	ha, err := a.l.Lock(ctx, []byte("k"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	require.NoError(t, a.cli.Close()) // A is gone: no recall reaches it, no request leaves it

	hb, err := b.l.Lock(ctx, []byte("k"), cluster(time.Second, 20*time.Second))
	require.NoError(t, err, "B is admitted once A's lease expires")
	assert.True(t, ha.IsLeaseExpired(), "A's holder lapsed before B was admitted")
	assert.Greater(t, hb.Token(), ha.Token())
	require.True(t, hb.Release())
	require.ErrorIs(t, a.coord.Close(), recordlock.ErrClusterUnavailable, "A cannot hand anything back")
}

// Tokens strictly increase per key across handoffs, and each is the revision that granted the
// delegation its round came from to the node.
func TestTokensIncreaseAcrossHandoffs(t *testing.T) {
	e := startEtcd(t)
	nodes := []*node{newNode(t, e, "a", nodeConfig{}), newNode(t, e, "b", nodeConfig{})}
	ctx := context.Background()
	var tokens []uint64
	for i := range 10 {
		n := nodes[i%2]
		h, err := n.l.Lock(ctx, []byte("k"), cluster(time.Second, 5*time.Second))
		require.NoError(t, err, "lock %d by %s: a delegation is created on, or handed over to, the node's etcd lease", i, n.name)
		resp, err := n.cli.Get(ctx, exclusiveKey("k"))
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1)
		require.Equal(t, n.lease(t), resp.Kvs[0].Lease, "a delegation lives on the node's etcd lease")
		assert.Equal(t, uint64(resp.Kvs[0].ModRevision), h.Token(), "the fencing token is the revision that granted the delegation")
		tokens = append(tokens, h.Token())
		require.True(t, h.Release())
	}
	for i := 1; i < len(tokens); i++ {
		assert.Greater(t, tokens[i], tokens[i-1], "fencing tokens increase per key across the cluster: %v", tokens)
	}
}

// Close revokes live admissions and hands every delegation back at once, so another node need
// not wait for the lease TTL; the closed coordinator grants nothing.
func TestCloseHandsBackDelegations(t *testing.T) {
	e := startEtcd(t)
	a := newNode(t, e, "a", nodeConfig{})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()

	ha, err := a.l.Lock(ctx, []byte("k"), cluster(10*time.Second, 10*time.Second))
	require.NoError(t, err)
	require.NoError(t, a.coord.Close())
	assert.True(t, ha.IsLeaseExpired(), "a delegation that ends revokes its local admissions at once; Close ends them all")
	require.NoError(t, a.coord.Close(), "Close is idempotent")

	hb, err := b.l.Lock(ctx, []byte("k"), cluster(time.Second, 2*time.Second)) // far below A's 60 s TTL
	require.NoError(t, err)
	require.True(t, hb.Release())

	_, err = a.l.Lock(ctx, []byte("k"), cluster(time.Second, time.Second))
	require.ErrorIs(t, err, recordlock.ErrClusterUnavailable)
}

// A clean Close hands back the delegations of released locks as hand-backs, not losses: the
// deletions its lease revocation makes are its own, so nothing is logged, Lost stays zero, and
// another node is admitted to every key at once. The race it guards against (the watch seeing
// those deletions before it stops) is not certain in one round, so several nodes close in turn.
// Each round's checking node closes too, so that no node finds a key held by another and the
// keys stay delegated until Close, as keys no other node wants do.
func TestCleanCloseIsNoLoss(t *testing.T) {
	e := startEtcd(t)
	ctx := context.Background()
	keys := []string{"k0", "k1", "k2"}
	for round := range 5 {
		b := newNode(t, e, fmt.Sprintf("b%d", round), nodeConfig{})
		var logs testutil.LogBuffer
		a := newNode(t, e, fmt.Sprintf("a%d", round), nodeConfig{opts: []etcdcoord.Option{
			etcdcoord.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		}})
		for _, k := range keys {
			h, err := a.l.Lock(ctx, []byte(k), cluster(time.Second, 10*time.Second))
			require.NoError(t, err)
			require.True(t, h.Release())
		}
		require.Equal(t, len(keys), a.coord.Stats().Delegations)
		require.NoError(t, a.coord.Close())

		s := a.coord.Stats()
		assert.Zero(t, s.Lost, "Stats.Lost counts no delegation the node handed back itself (round %d)", round)
		assert.Equal(t, uint64(len(keys)), s.HandBacks, "round %d", round)
		assert.Zero(t, s.Delegations, "round %d", round)
		assert.Empty(t, logs.String(), "round %d", round)
		for _, k := range keys {
			// Far below A's 60 s TTL: the keys are free the moment Close returns.
			h, err := b.l.Lock(ctx, []byte(k), cluster(time.Second, 2*time.Second))
			require.NoError(t, err, "round %d key %s", round, k)
			require.True(t, h.Release())
		}
		require.NoError(t, b.coord.Close())
	}
}

// MintedMono is read before the granting request is sent: a request that takes a second moves
// the round's deadline no later, so this node's deadline falls before etcd's.
func TestMintedBeforeRequest(t *testing.T) {
	e := startEtcd(t)
	clk := recordlock.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	n := newNode(t, e, "a", nodeConfig{clock: clk})
	ctx := context.Background()
	h, err := n.l.Lock(ctx, []byte("warm-up"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	require.True(t, h.Release())

	// Each Txn request takes a second. The etcd client resends a request that etcd failed with
	// a context error while the caller's context is live (a proposal that waited past etcd's
	// request timeout on a loaded host): its attempts reach the hook with the same req and count
	// as one request, which the round's mint precedes as it precedes them all.
	var mu sync.Mutex
	var sent any
	n.reqs.setHook(func(_ context.Context, method string, req any, invoke func() error) error {
		mu.Lock()
		fresh := method == txnMethod && req != sent
		if fresh {
			sent = req
		}
		mu.Unlock()
		if fresh {
			clk.Advance(time.Second)
		}
		return invoke()
	})
	before := n.l.Timestamp()
	h, err = n.l.Lock(ctx, []byte("k"), cluster(5*time.Second, 10*time.Second))
	require.NoError(t, err)
	tsR, ok := h.ClusterTsR()
	require.True(t, ok)
	assert.Greater(t, tsR, before, "TsR comes from the Locker's timestamps")
	clk.Advance(4*time.Second - time.Nanosecond) // 5 s since the mint, less a nanosecond
	assert.False(t, h.IsLeaseExpired())
	clk.Advance(time.Nanosecond)
	assert.True(t, h.IsLeaseExpired(), "MintedMono is read before the round is requested; the deadline is MintedMono+Lease")
}

// A delegation nobody has used for the linger period is handed back, so a node that locks many
// distinct keys does not keep them all in etcd; one in use is kept, and so is one whose last
// lease ended less than the linger period ago.
func TestIdleDelegationsAreHandedBack(t *testing.T) {
	e := startEtcd(t)
	clk := recordlock.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	n := newNode(t, e, "a", nodeConfig{clock: clk, opts: []etcdcoord.Option{etcdcoord.WithLinger(time.Second)}})
	ctx := context.Background()
	lock := func(key string, lease time.Duration) *recordlock.Handle {
		t.Helper()
		h, err := n.l.Lock(ctx, []byte(key), cluster(lease, 10*time.Second))
		require.NoError(t, err)
		return h
	}
	exists := func(key string) bool {
		t.Helper()
		resp, err := n.cli.Get(ctx, exclusiveKey(key))
		require.NoError(t, err)
		return len(resp.Kvs) == 1
	}
	idle := lock("idle", time.Second)
	first := idle.Token()
	require.True(t, idle.Release())
	recent := lock("recent", 1500*time.Millisecond)
	require.True(t, recent.Release())
	held := lock("held", 5*time.Second)

	clk.Advance(2 * time.Second)        // "idle" ended at 1 s: a second of linger has passed
	other := lock("other", time.Second) // this Acquire looks for idle delegations
	waitForDelete(t, n.cli, exclusiveKey("idle"))
	assert.True(t, exists("held"), "a delegation in use is kept")
	assert.True(t, exists("recent"), "a delegation whose last lease ended 0.5 s ago, less than the linger period, is kept")
	assert.False(t, held.IsExpired())
	require.True(t, held.Release())
	require.True(t, other.Release())

	again := lock("idle", time.Second)
	assert.Greater(t, again.Token(), first, "a new delegation")
	require.True(t, again.Release())
}

func TestNewRejectsBadOptions(t *testing.T) {
	e := startEtcd(t)
	n := newNode(t, e, "a", nodeConfig{})
	cases := map[string]func() (*etcdcoord.Coordinator, error){
		"nil client": func() (*etcdcoord.Coordinator, error) { return etcdcoord.New(nil, "x") },
		"empty node": func() (*etcdcoord.Coordinator, error) { return etcdcoord.New(n.cli, "") },
		"nil clock":  func() (*etcdcoord.Coordinator, error) { return etcdcoord.New(n.cli, "x", etcdcoord.WithClock(nil)) },
		"TTL too short": func() (*etcdcoord.Coordinator, error) {
			return etcdcoord.New(n.cli, "x", etcdcoord.WithTTL(time.Second), etcdcoord.WithSkew(time.Second))
		},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := f()
			require.ErrorIs(t, err, recordlock.ErrInvalidOptions)
			assert.Nil(t, c)
		})
	}
}
