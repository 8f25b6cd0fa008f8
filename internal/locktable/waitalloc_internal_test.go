package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A request that queues behind a key's one holder tells the holder's owner without a deferred
// list of its own: with a waited-on function set, the wait allocates what it does without one.
// Behind sharers each is told, in their order.
func TestWaitTellsTheOneHolderWithoutAllocating(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), System)
	var told []Owner
	holder := &testTxn{name: "holder"}
	h, err := l.acquire(context.Background(), []byte("k"), testOptions{}, holder, true)
	require.NoError(t, err)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	wait := func() { // queues behind the holder, finds ctx done and leaves
		r := l.newClaim([]byte("k"), testOptions{}, nil)
		_, err := r.Acquire(cancelled, defaultLease, defaultTimeout, true, false)
		if err != context.Canceled {
			t.Errorf("the wait ended with %v", err)
		}
	}
	without := testing.AllocsPerRun(20, wait)
	l.ten.SetOnWaitedOn(func(o Owner) { told = append(told, o) })
	told = make([]Owner, 0, 64)
	with := testing.AllocsPerRun(20, wait)
	assert.Equal(t, without, with, "allocations of a wait with a waited-on function and without")
	assert.Len(t, told, 21, "one call per wait (AllocsPerRun runs once more)")
	for _, o := range told {
		assert.Same(t, holder, o)
	}
	require.True(t, h.Release())

	a, b := &testTxn{name: "a"}, &testTxn{name: "b"}
	sa, err := l.acquire(context.Background(), []byte("s"), testOptions{Shared: true}, a, true)
	require.NoError(t, err)
	sb, err := l.acquire(context.Background(), []byte("s"), testOptions{Shared: true}, b, true)
	require.NoError(t, err)
	told = told[:0]
	r := l.newClaim([]byte("s"), testOptions{}, nil)
	_, err = r.Acquire(cancelled, defaultLease, defaultTimeout, true, false)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []Owner{a, b}, told, "each sharer is told, in their order")
	require.True(t, sa.Release())
	require.True(t, sb.Release())
}

// The wait-for graph reads the edges of a Txn's wait for a key of a key shard without
// allocating: every search of every wait of a Txn reads them.
func TestKeyWaitEdgesAllocateNothing(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), System)
	a, b := &testTxn{name: "a"}, &testTxn{name: "b"}
	ha, err := l.acquire(context.Background(), []byte("k"), testOptions{}, a, true)
	require.NoError(t, err)
	res := ownerLockAsync(context.Background(), l, []byte("k"), testOptions{}, b)
	WaitQueued(t, l, []byte("k"), 1)
	require.Eventually(t, func() bool { return graphWaiting(l) == 1 }, testutil.Guard, 200*time.Microsecond, "b enters the graph")
	g := &l.tab.graph
	g.mu.Lock()
	hb := g.waiting[keyOf(b)]
	out := make([]Owner, 0, 4)
	allocs := testing.AllocsPerRun(20, func() { out = g.blockers(b, hb, out[:0]) })
	g.mu.Unlock()
	assert.Zero(t, allocs, "allocations of one read of b's edges")
	assert.Equal(t, []Owner{a}, out, "b waits for a")
	require.True(t, ha.Release())
	r := testutil.Await(t, res, "b's lock")
	require.NoError(t, r.err)
	require.True(t, r.h.Release())
}
