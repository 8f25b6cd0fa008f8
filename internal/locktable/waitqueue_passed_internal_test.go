package locktable

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An upgrade passed in a home shard (rangepass.go) still fails as soon as its share ends: o holds
// [a, z) shared and p holds k shared; p's upgrade of k waits for o's range, and o's exclusive k
// then passes it, queued ahead of it. o's request closes o → p → o and would fail as a deadlock
// once it enters the wait-for graph, but before it does (held in the waited-on call its wait
// makes to p's tenant) p's share is revoked. The upgrade, queued behind o's request, must fail
// then with ErrLeaseExpired, not wait for a share that is gone until o lets k go.
func TestShareEndedFailsItsUpgradeQueuedBehindAPasser(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	o, p := &testTxn{l: l, name: "o"}, &testTxn{l: l, name: "p"}
	var armed atomic.Bool
	passed, resume := make(chan struct{}), make(chan struct{})
	l.ten.SetOnWaitedOn(func(told Owner) {
		if told == p && armed.CompareAndSwap(true, false) {
			close(passed)
			<-resume
		}
	})
	ctx := context.Background()
	r, err := ownerTryRange(l, "a", "z", testOptions{Shared: true}, o)
	require.NoError(t, err)
	o.claims = append(o.claims, r)
	k, err := p.Lock(ctx, []byte("k"), testOptions{Shared: true})
	require.NoError(t, err)
	gotUp := txnLockResult(t, p, []byte("k"), testOptions{})
	WaitQueued(t, l, []byte("k"), 1)
	require.True(t, testutil.NotReturned(gotUp), "p's upgrade waits for o's range")

	armed.Store(true)
	gotK := txnLockResult(t, o, []byte("k"), testOptions{})
	testutil.Await(t, passed, "o's request, queued and not yet in the wait-for graph")
	sh := k.shard()
	sh.mu.Lock()
	e := k.e
	order := e.head != nil && e.head.upgrade == nil && e.head.next != nil && e.head.next.upgrade == k
	sh.mu.Unlock()
	require.True(t, order, "o's request passed p's upgrade")

	k.Revoke()
	close(resume)
	res := testutil.Await(t, gotK, "o's exclusive k, once p's share was revoked")
	require.NoError(t, res.err)
	up := testutil.Await(t, gotUp, "p's upgrade, while o holds k")
	assert.ErrorIs(t, up.err, ErrLeaseExpired, "the upgrade fails as its share is revoked")
	o.Rollback()
	p.Rollback()
	assert.True(t, ProbeTableEmpty(l))
}
