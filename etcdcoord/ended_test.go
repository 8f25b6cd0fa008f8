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

// watchGate holds a node's watch before each batch of events until the test lets it through.
type watchGate struct {
	arrived atomic.Int32  // batches that reached the gate
	pass    chan struct{} // one value lets one batch through
	open    chan struct{} // closed: every batch goes through
	once    sync.Once
}

func newWatchGate() *watchGate {
	return &watchGate{pass: make(chan struct{}, 64), open: make(chan struct{})}
}

func (g *watchGate) lag() {
	g.arrived.Add(1)
	select {
	case <-g.pass:
	case <-g.open:
	}
}

func (g *watchGate) release() { g.once.Do(func() { close(g.open) }) }

// A delegation the node has handed back is never adopted again from its watch's late report
// of the grant. A's Txn creates the key, A's watch is held before it reports that, and A hands
// the key back once it has lingered idle; B then locks the key. When A's watch finally reports
// the old grant, A must not take it for a delegation of its own: a TryLock on A would be
// admitted, with the old token, while B holds the key.
func TestLateWatchDoesNotReadoptEndedDelegation(t *testing.T) {
	e := startEtcd(t)
	b := newNode(t, e, "b", nodeConfig{}) // first: A's watch sees no registration
	clock := recordlock.NewManualClock(time.Unix(1, 0))
	gate := newWatchGate()
	a := newNode(t, e, "a", nodeConfig{clock: clock, opts: []etcdcoord.Option{
		etcdcoord.WithLinger(time.Second), etcdcoord.WithWatchLag(gate.lag)}})
	t.Cleanup(gate.release) // before A closes: Close waits for the watch
	ctx := context.Background()

	ha, err := a.l.Lock(ctx, []byte("k"), cluster(500*time.Millisecond, 10*time.Second))
	require.NoError(t, err)
	require.True(t, ha.Release())
	clock.Advance(2 * time.Second)                                                       // the delegation lingered idle
	hz, err := a.l.Lock(ctx, []byte("z"), cluster(500*time.Millisecond, 10*time.Second)) // sweeps k
	require.NoError(t, err)
	require.True(t, hz.Release())
	require.Eventually(t, func() bool { return a.coord.Stats().HandBacks == 1 }, 10*time.Second, time.Millisecond,
		"A did not hand the idle key back")
	waitForDelete(t, a.cli, exclusiveKey("k"))

	hb, err := b.l.Lock(ctx, []byte("k"), cluster(10*time.Second, 10*time.Second))
	require.NoError(t, err)
	gate.pass <- struct{}{} // A's watch reports its grant of k, and stops before the hand-back
	require.Eventually(t, func() bool { return gate.arrived.Load() >= 2 }, 10*time.Second, time.Millisecond,
		"A's watch did not apply its first batch")

	tried := make(chan lockResult, 1)
	go func() {
		h, err := a.l.TryLock([]byte("k"), cluster(time.Second, 200*time.Millisecond))
		tried <- lockResult{h, err}
	}()
	r := awaitOnClock(t, clock, tried) // the TryLock's wait runs on A's clock
	if r.err == nil {
		r.h.Release()
		t.Fatalf("an event for a delegation the node has seen end is never adopted again, but A was "+
			"admitted with token %d while B holds the key with token %d", r.h.Token(), hb.Token())
	}
	require.ErrorIs(t, r.err, recordlock.ErrLocked)
	require.True(t, hb.Release())
	gate.release() // A's watch reports its hand-back, and B's grant and hand-back of the key
	r = awaitOnClock(t, clock, lockAsync(a, "k", cluster(time.Second, 10*time.Second)))
	require.NoError(t, r.err)
	assert.Greater(t, r.h.Token(), hb.Token())
	require.True(t, r.h.Release())
	assert.Zero(t, a.coord.Stats().Lost, "the hand-back A made counted as a loss")
}

// awaitOnClock returns the result of a lock whose wait runs on clock, moving clock on until the
// lock returns.
func awaitOnClock(t *testing.T, clock *recordlock.ManualClock, got chan lockResult) lockResult {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case r := <-got:
			return r
		case <-time.After(5 * time.Millisecond):
			clock.Advance(50 * time.Millisecond)
		}
	}
	t.Fatal("the lock did not return")
	return lockResult{}
}
