package etcdcoord_test

import (
	"context"
	"log/slog"
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

// A fenced commit in flight holds the hand-back up for as long as the node trusts its etcd
// lease as it keeps refreshing it, not only until the deadline that lease had when the recall
// arrived. A's lease is trusted until 9 s on A's clock; A's holder of k has a 2 s lease and
// runs a long fenced commit when B asks for the key. A then refreshes its lease for a lock of
// another key, and its clock passes 9 s: B must still wait for the commit.
func TestFencedCommitBoundedByRefreshedLease(t *testing.T) {
	e := startEtcd(t)
	clock := recordlock.NewManualClock(time.Unix(1, 0))
	a := newNode(t, e, "a", nodeConfig{clock: clock, opts: []etcdcoord.Option{
		etcdcoord.WithTTL(10 * time.Second), etcdcoord.WithSkew(time.Second)}})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()

	ha, err := a.l.Lock(ctx, []byte("k"), cluster(2*time.Second, 10*time.Second))
	require.NoError(t, err)
	entered, finish := make(chan struct{}), make(chan struct{})
	fenced := make(chan error, 1)
	go func() { fenced <- ha.Fence(func() error { close(entered); <-finish; return nil }) }()
	<-entered
	got := lockAsync(b, "k", cluster(time.Second, 30*time.Second))
	require.Eventually(t, func() bool { return a.coord.Stats().RecallsReceived == 1 }, 10*time.Second, time.Millisecond)

	clock.Advance(3 * time.Second)                                                    // past the holder's deadline: its revocation waits for the commit
	ho, err := a.l.Lock(ctx, []byte("other"), cluster(8*time.Second, 10*time.Second)) // refreshes A's lease to 12 s
	require.NoError(t, err)
	require.True(t, ho.Release())
	clock.Advance(7 * time.Second)     // 10 s: past the 9 s A trusted when the recall arrived
	time.Sleep(300 * time.Millisecond) // room for a wrong hand-back
	assert.False(t, admitted(got), "a hand-back waits for a running fenced commit while the node's lease "+
		"lives as refreshed, but B was admitted while A's commit ran")

	close(finish)
	require.NoError(t, <-fenced)
	r := <-got
	require.NoError(t, r.err)
	assert.Greater(t, r.h.Token(), ha.Token())
	require.True(t, r.h.Release())
}

// A recall that arrives once the node has stopped trusting its etcd lease, but before etcd
// lets it go, finds no fenced commit running: the node hands the key over to the asker, which
// is admitted with no request beyond the Txn that asked, and nothing is logged. The interleaving
// is the one where the node's lapsed trust is seen before the revocation of its released
// admission returns: that revocation is held (heldRevokes) until the node sends its hand-back
// Txn, which waits in turn until the revocation has returned. So no Fence runs, and the node
// must not take the held revocation for one.
func TestRecallAfterTrustEndsHandsOver(t *testing.T) {
	e := startEtcd(t)
	clock := recordlock.NewManualClock(time.Unix(1, 0))
	var logs testutil.LogBuffer
	a := newNode(t, e, "a", nodeConfig{clock: clock, opts: []etcdcoord.Option{
		etcdcoord.WithTTL(10 * time.Second), etcdcoord.WithSkew(time.Second),
		etcdcoord.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))}})
	b := newNode(t, e, "b", nodeConfig{})
	ctx := context.Background()
	held := newHeldRevokes(t, a)

	ha, err := a.l.Lock(ctx, []byte("k"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	require.True(t, ha.Release())          // a released admission the recall revokes
	clock.Advance(9500 * time.Millisecond) // A trusted its lease until 9 s; etcd keeps it 10 s of real time
	held.arm()

	before := b.reqs.snapshot()
	got := lockAsync(b, "k", cluster(time.Second, 10*time.Second))
	var r lockResult
	for r.h == nil && r.err == nil { // A's timers run as its clock ticks on, without moving
		select {
		case r = <-got:
		case <-time.After(time.Millisecond):
			clock.Advance(0)
		}
	}
	require.NoError(t, r.err)
	hb := r.h
	assert.True(t, held.revoked(), "A handed the key back without revoking its released admission")
	assert.Equal(t, 1, b.reqs.since(before)[txnMethod], "B's Txns: the recall only")
	assert.Greater(t, hb.Token(), ha.Token())
	require.True(t, hb.Release())
	require.Eventually(t, func() bool { return a.coord.Stats().HandBacks == 1 }, 10*time.Second, time.Millisecond)
	assert.False(t, strings.Contains(logs.String(), "level=WARN"), "A logged:\n%s", logs.String())
}

// heldRevokes stands between a node's Locker and its coordinator and, once armed, holds the
// first revocation the coordinator runs until the node sends its next Txn; that Txn goes out
// once the revocation has returned.
type heldRevokes struct {
	*etcdcoord.Coordinator
	armed atomic.Bool // set once the test reaches the interleaving; before, nothing is held
	// sent closes when the node sends its first Txn once armed (or as the test ends); returned,
	// when the first revocation has returned: each once
	sent, returned       chan struct{}
	sendOnce, returnOnce sync.Once
}

func newHeldRevokes(t *testing.T, n *node) *heldRevokes {
	h := &heldRevokes{Coordinator: n.coord, sent: make(chan struct{}), returned: make(chan struct{})}
	t.Cleanup(func() { h.sendOnce.Do(func() { close(h.sent) }) }) // lets Close's revocations through
	n.l.SetCoordinator(h)
	n.reqs.setHook(func(ctx context.Context, method string, req any, invoke func() error) error {
		if method == txnMethod && h.armed.Load() {
			h.sendOnce.Do(func() { close(h.sent) })
			select {
			case <-h.returned:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return invoke()
	})
	return h
}

func (h *heldRevokes) arm() { h.armed.Store(true) }

func (h *heldRevokes) revoked() bool {
	select {
	case <-h.returned:
		return true
	default:
		return false
	}
}

func (h *heldRevokes) Acquire(ctx context.Context, req recordlock.Request) (recordlock.Round, error) {
	revoke := req.Revoke
	req.Revoke = func() {
		if h.armed.Load() {
			<-h.sent
		}
		revoke()
		h.returnOnce.Do(func() { close(h.returned) })
	}
	return h.Coordinator.Acquire(ctx, req)
}
