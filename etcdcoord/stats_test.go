package etcdcoord_test

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/etcdcoord"
	"github.com/recordlock/recordlock/internal/testutil"
)

// Stats count what the coordinators did, and a failed hand-back is logged and retried.
func TestStatsAndLogs(t *testing.T) {
	e := startEtcd(t)
	var logs testutil.LogBuffer
	a := newNode(t, e, "a", nodeConfig{opts: []etcdcoord.Option{etcdcoord.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))}})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()

	h, err := a.l.Lock(ctx, []byte("k"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	require.True(t, h.Release())
	s := a.coord.Stats()
	assert.Equal(t, 1, s.Delegations)
	assert.Equal(t, 1, s.Retained, "a released admission whose lease has not ended")

	var failed bool
	a.reqs.setHook(func(ctx context.Context, method string, req any, invoke func() error) error {
		if method == "/etcdserverpb.KV/Txn" && !failed {
			failed = true // A's first hand-back
			return errLostReply
		}
		return invoke()
	})
	h, err = b.l.Lock(ctx, []byte("k"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	require.True(t, h.Release())

	// B may be admitted before the reply to A's hand-back reaches A.
	assert.Eventually(t, func() bool { return a.coord.Stats().HandBacks == 1 }, 10*time.Second, 10*time.Millisecond)
	s = a.coord.Stats()
	assert.Equal(t, 0, s.Delegations)
	assert.Equal(t, 0, s.Retained)
	assert.Equal(t, uint64(1), s.RecallsReceived)
	assert.Equal(t, uint64(1), b.coord.Stats().RecallsSent)
	// Nobody waited when B released: it keeps the key.
	assert.Equal(t, 1, b.coord.Stats().Delegations)
	assert.Equal(t, uint64(0), b.coord.Stats().HandBacks)
	assert.Contains(t, logs.String(), "hand-back failed")
}

// What a delegation keeps for revocation does not grow with the lock rate: many locks of one
// key with a long lease retain a bounded number of admissions and little memory.
func TestRetentionBounded(t *testing.T) {
	locks := 30_000
	if *long {
		locks = 300_000
	}
	e := startEtcd(t)
	n := newNode(t, e, "a", nodeConfig{})
	ctx := context.Background()
	opts := cluster(30*time.Second, 10*time.Second)
	h, err := n.l.Lock(ctx, []byte("k"), opts)
	require.NoError(t, err)
	require.True(t, h.Release())

	before := heapInUse()
	for range locks {
		h, err := n.l.Lock(ctx, []byte("k"), opts)
		require.NoError(t, err)
		h.Release()
	}
	grown := heapInUse() - before
	assert.LessOrEqual(t, n.coord.Stats().Retained, etcdcoord.RetainedPerKey)
	assert.Less(t, grown, int64(1<<20), "heap grew by %d bytes over %d locks", grown, locks)
	t.Logf("%d locks of one key with a 30s lease: %d admissions retained, heap %+d bytes",
		locks, n.coord.Stats().Retained, grown)
}

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// An idle node's etcd lease expires with every delegation on it, as the package doc says it
// should: that is counted as Expired, not Lost, nothing is logged, and another node takes each
// key at once.
func TestIdleExpiryIsNoLoss(t *testing.T) {
	e := startEtcd(t)
	var logs testutil.LogBuffer
	a := newNode(t, e, "a", nodeConfig{opts: []etcdcoord.Option{
		etcdcoord.WithTTL(2 * time.Second), etcdcoord.WithSkew(500 * time.Millisecond),
		etcdcoord.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
	}})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	keys := []string{"k1", "k2", "k3"}
	for _, k := range keys {
		h, err := a.l.Lock(ctx, []byte(k), cluster(time.Second, 10*time.Second))
		require.NoError(t, err)
		require.True(t, h.Release())
	}
	require.Equal(t, len(keys), a.coord.Stats().Delegations)

	// A makes no request from now on: etcd lets its lease go, and A's watch sees each key deleted.
	require.Eventually(t, func() bool { return a.coord.Stats().Delegations == 0 }, 10*time.Second, 10*time.Millisecond)
	s := a.coord.Stats()
	assert.Zero(t, s.Lost, "an idle node's expiry counted as a loss")
	assert.Equal(t, uint64(len(keys)), s.Expired)
	assert.NotContains(t, logs.String(), "level=WARN", "an idle node's expiry logged a warning")
	for _, k := range keys {
		h, err := b.l.Lock(ctx, []byte(k), cluster(time.Second, time.Second))
		require.NoError(t, err, "B takes %s without waiting", k)
		require.True(t, h.Release())
	}
	h, err := a.l.Lock(ctx, []byte("k1"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err, "A locks again on a new lease")
	require.True(t, h.Release())
	assert.Zero(t, a.coord.Stats().Lost)
}

// Once the node's etcd client is closed, nothing it could send reaches etcd: a hand-back that
// fails for that reason is given up with one warning, not retried and logged until Close.
func TestClosedClientStopsHandBackRetries(t *testing.T) {
	e := startEtcd(t)
	var logs testutil.LogBuffer
	a := newNode(t, e, "a", nodeConfig{opts: []etcdcoord.Option{
		etcdcoord.WithTTL(2 * time.Second), etcdcoord.WithSkew(500 * time.Millisecond),
		etcdcoord.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
	}})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	ha, err := a.l.Lock(ctx, []byte("k"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	got := lockAsync(b, "k", cluster(time.Second, 10*time.Second))
	require.Eventually(t, func() bool { return a.coord.Stats().RecallsReceived == 1 }, 10*time.Second, time.Millisecond)

	require.NoError(t, a.cli.Close())
	ha.Release() // A's hand-back can no longer be sent
	r := <-got
	require.NoError(t, r.err, "B is admitted once A's lease expires")
	require.True(t, r.h.Release())
	time.Sleep(6 * time.Second) // room for retries: on a closed client each fails within about 3 s
	assert.LessOrEqual(t, strings.Count(logs.String(), "level=WARN"), 1, "warnings after the client closed:\n%s", logs.String())
}

// Stats.Requests counts the requests the coordinator sends to etcd, and the client's own count
// of the calls on the wire agrees at each step: New grants a lease and registers the name, and
// the watch it starts reads the prefix once; a cold key costs one Txn; repeat locks from the
// node's delegation cost nothing; a lock at the longest lease refreshes the etcd lease once;
// Close revokes it, and that revoke counts although it fails. The watch stream is not a request.
func TestStatsRequests(t *testing.T) {
	const (
		watchMethod  = "/etcdserverpb.Watch/Watch"
		rangeMethod  = "/etcdserverpb.KV/Range"
		grantMethod  = "/etcdserverpb.Lease/LeaseGrant"
		revokeMethod = "/etcdserverpb.Lease/LeaseRevoke"
	)
	e := startEtcd(t)
	n := newNode(t, e, "a", nodeConfig{})
	ctx := context.Background()
	// The watch sends its first message after its read of the prefix has returned.
	require.Eventually(t, func() bool { return n.reqs.snapshot()[watchMethod] > 0 },
		10*time.Second, time.Millisecond, "the node's watch never started")

	var last uint64
	before := map[string]int{} // the client is the coordinator's alone: everything it sent
	step := func(what string, want map[string]int) {
		t.Helper()
		sent := n.reqs.since(before)
		delete(sent, watchMethod)
		assert.Equal(t, want, sent, "%s: the requests on the wire", what)
		wire := 0
		for _, k := range sent {
			wire += k
		}
		now := n.coord.Stats().Requests
		assert.Equal(t, uint64(wire), now-last, "%s: Stats.Requests grew by what went on the wire", what)
		last, before = now, n.reqs.snapshot()
	}
	step("New and the watch's first read", map[string]int{grantMethod: 1, txnMethod: 1, rangeMethod: 1})

	lock := func(key string, lease time.Duration) {
		t.Helper()
		h, err := n.l.Lock(ctx, []byte(key), cluster(lease, 10*time.Second))
		require.NoError(t, err)
		require.True(t, h.Release())
	}
	lock("k", time.Second)
	step("the first lock of a cold key", map[string]int{txnMethod: 1})

	for range etcdcoord.RetainedPerKey + 4 { // past what the delegation keeps: eviction is local too
		lock("k", time.Second)
	}
	step("repeat locks from the node's delegation", map[string]int{})

	// A round must end before the etcd lease, measured from before its last refresh.
	lock("k", etcdcoord.DefaultTTL-etcdcoord.DefaultSkew)
	step("a repeat lock at the longest lease", map[string]int{keepAliveMethod: 1})

	n.reqs.setHook(func(ctx context.Context, method string, req any, invoke func() error) error {
		if method == revokeMethod {
			_ = invoke()
			return errLostReply
		}
		return invoke()
	})
	require.ErrorIs(t, n.coord.Close(), recordlock.ErrClusterUnavailable, "Close's revoke lost its reply")
	step("Close, whose revoke fails", map[string]int{revokeMethod: 1})
}
