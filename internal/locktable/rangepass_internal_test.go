package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The exception to the order of arrival (rangepass.go): a request of an owner never waits behind a
// queued request that waits for a lock of that owner.

// ownerTryRange is TryLockRange on behalf of owner.
func ownerTryRange(l *testLocker, start, end string, o testOptions, owner Owner) (*Claim, error) {
	return l.acquireRange(context.Background(), []byte(start), endOf(end), o, owner, false)
}

// A writer that holds a key and asks for a second one, inside a range a reader queued for
// because of the first, is granted the second: waiting behind the reader would be a deadlock
// (the reader waits for the writer), which is what ordered writers beside range readers met.
func TestOwnerPassesRangeRequestWaitingForIt(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	writer, reader := &testTxn{l: l, name: "writer"}, &testTxn{l: l, name: "reader"}
	ctx := context.Background()
	a, err := writer.Lock(ctx, []byte("p/a"), testOptions{})
	require.NoError(t, err)
	gotRange := rangeAsync(l, "p/", "p0", testOptions{Shared: true}, reader)
	waitRangesQueued(t, l, 1)

	b, err := writer.Lock(ctx, []byte("p/b"), testOptions{})
	require.NoError(t, err, "the writer passes the reader's range, which waits for its p/a")
	select {
	case res := <-gotRange:
		t.Fatalf("the reader's range was served while the writer holds p/a and p/b: %v", res.err)
	default:
	}
	require.True(t, a.Release())
	require.True(t, b.Release())
	res := testutil.Await(t, gotRange, "the reader's range, once the writer let go")
	require.NoError(t, res.err)
	require.True(t, res.h.Release())
	writer.Rollback()
	assert.True(t, ProbeTableEmpty(l))
}

// A request of an owner that does not wait for the owner is not passed: a writer that holds
// nothing, or holds a key the range does not meet, queues behind the range as before.
func TestOwnerDoesNotPassRangeRequestNotWaitingForIt(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	other := &testTxn{l: l, name: "other"}
	writer := &testTxn{l: l, name: "writer"}
	ctx := context.Background()
	a, err := other.Lock(ctx, []byte("p/a"), testOptions{})
	require.NoError(t, err)
	x, err := writer.Lock(ctx, []byte("x"), testOptions{}) // outside the range
	require.NoError(t, err)
	gotRange := rangeAsync(l, "p/", "p0", testOptions{Shared: true}, nil)
	waitRangesQueued(t, l, 1)

	_, err = l.acquire(ctx, []byte("p/b"), testOptions{OwnerHolds: true}, writer, false)
	assert.ErrorIs(t, err, ErrLocked, "the range waits for another owner's key, not the writer's")
	require.True(t, a.Release())
	res := testutil.Await(t, gotRange, "the range, once p/a is released")
	require.NoError(t, res.err)
	require.True(t, res.h.Release())
	require.True(t, x.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// The freeze: an owner holds an exclusive range over k0 and another's shared request for k0
// waits for it; the owner's own shared request for k0 takes it at once instead of queueing
// behind that request, where nothing (no edge, no timeout but its own) would end the wait.
func TestOwnerKeyRequestPassesWaiterOfItsRange(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	a := &testTxn{l: l, name: "a"}
	r, err := ownerTryRange(l, "k0", "k1", testOptions{}, a)
	require.NoError(t, err)
	got := lockAsync(context.Background(), l, []byte("k0"), testOptions{Shared: true})
	WaitQueued(t, l, []byte("k0"), 1)

	h, err := l.acquire(context.Background(), []byte("k0"), testOptions{Shared: true, OwnerHolds: true}, a, false)
	require.NoError(t, err, "the owner's request passes the one that waits for its range")
	require.True(t, r.Release())
	require.True(t, h.Release())
	res := testutil.Await(t, got, "the other's shared k0, once the owner let go")
	require.NoError(t, res.err)
	require.True(t, res.h.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// A request that passes another but must wait for a holder queues ahead of the one it passes,
// and is served first: there the two would otherwise wait for each other.
func TestOwnerKeyRequestQueuesAheadOfWaiterOfItsRange(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	a := &testTxn{l: l, name: "a"}
	ctx := context.Background()
	r, err := ownerTryRange(l, "k0", "k1", testOptions{Shared: true}, a)
	require.NoError(t, err)
	c, err := l.TryLock([]byte("k0"), testOptions{Shared: true})
	require.NoError(t, err)
	gotB := ownerLockAsync(ctx, l, []byte("k0"), testOptions{}, &testTxn{l: l, name: "b"})
	WaitQueued(t, l, []byte("k0"), 1)

	gotA := ownerLockAsync(ctx, l, []byte("k0"), testOptions{OwnerHolds: true}, a)
	WaitQueued(t, l, []byte("k0"), 2)
	require.True(t, c.Release())
	resA := testutil.Await(t, gotA, "the owner's exclusive k0, once the other sharer left")
	require.NoError(t, resA.err, "not a deadlock: the owner queued ahead of the request waiting for its range")
	// The other's wait may be checked for a cycle again as the owner is granted; once settled, it
	// still waits, for the owner.
	WaitQueued(t, l, []byte("k0"), 1)
	select {
	case res := <-gotB:
		t.Fatalf("the other's request ended while the owner held k0: %v", res.err)
	default:
	}
	require.True(t, resA.h.Release())
	require.True(t, r.Release())
	resB := testutil.Await(t, gotB, "the other's exclusive k0")
	require.NoError(t, resB.err)
	require.True(t, resB.h.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// A range request of an owner passes what waits for the owner's locks: a key's request inside
// the owner's range, and a range request that waits for the owner's key.
func TestOwnerRangeRequestPassesWaitersOfItsLocks(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	a := &testTxn{l: l, name: "a"}
	ctx := context.Background()
	held, err := ownerTryRange(l, "a", "b", testOptions{}, a)
	require.NoError(t, err)
	gotKey := lockAsync(ctx, l, []byte("a1"), testOptions{})
	WaitQueued(t, l, []byte("a1"), 1)
	over, err := ownerTryRange(l, "a", "c", testOptions{OwnerHolds: true}, a)
	require.NoError(t, err, "the owner passes the key request that waits for its range [a, b)")

	key, err := a.Lock(ctx, []byte("x"), testOptions{OwnerHolds: true})
	require.NoError(t, err)
	gotRange := rangeAsync(l, "w", "y", testOptions{Shared: true}, nil)
	waitRangesQueued(t, l, 1)
	beside, err := ownerTryRange(l, "x", "z", testOptions{OwnerHolds: true}, a)
	require.NoError(t, err, "the owner passes the range request that waits for its key x")

	for _, h := range []*Claim{held, over, key, beside} {
		require.True(t, h.Release())
	}
	for _, ch := range []<-chan lockResult{gotKey, gotRange} {
		res := testutil.Await(t, ch, "a request the owner passed, once it let go")
		require.NoError(t, res.err)
		require.True(t, res.h.Release())
	}
	a.Rollback()
	assert.True(t, ProbeTableEmpty(l))
}

// The exception follows waits through other owners' requests (DESIGN §17.2): W2 holds a, W holds
// b shared, and a reader's shared range over [a, e) queues for a; W asks for d and queues behind
// the reader's range, which waits for nothing of W's yet. Then W2 asks for b and waits for W's
// share: now the reader waits for W through W2's wait, so W passes it and takes d, and W2's wait
// closes no cycle. All three lock in key order, or take one range, so none may meet a deadlock
// : the chain ends at W's b, below the d W asks. A Txn that asks below the lock such a
// chain ends at passes nothing through it (§17.2).
func TestOwnerPassesRangeRequestThatWaitsForItThroughAnotherOwner(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	ctx := context.Background()
	w, w2, reader := &testTxn{l: l, name: "W"}, &testTxn{l: l, name: "W2"}, &testTxn{l: l, name: "reader"}
	t.Cleanup(w.Rollback)
	t.Cleanup(w2.Rollback)
	_, err := w2.Lock(ctx, []byte("a"), testOptions{})
	require.NoError(t, err)
	_, err = w.Lock(ctx, []byte("b"), testOptions{Shared: true})
	require.NoError(t, err)
	gotRange := rangeAsync(l, "a", "e", testOptions{Shared: true}, reader)
	waitRangesQueued(t, l, 1)
	gotD := txnLockResult(t, w, []byte("d"), testOptions{})
	waitingCount(t, l, 2)

	gotB := txnLockResult(t, w2, []byte("b"), testOptions{})
	var res lockResult
	select {
	case r := <-gotB:
		require.False(t, isDeadlock(r.err), "Txns that lock in key order never "+
			"deadlock beside a Txn that takes one range; W must pass the reader's range, which waits for W through W2's wait")
		t.Fatalf("W2's request for b, held shared by W, returned: %v", r.err)
	case res = <-gotD:
	case <-time.After(testutil.Guard):
		t.Fatal("W's request for d, which passes the reader's range, was not granted")
	}
	require.NoError(t, res.err)
	assert.True(t, testutil.NotReturned(gotB), "W2 waits for W's share of b")
	w.Rollback()
	require.NoError(t, testutil.Await(t, gotB, "W2's request for b once W rolled back").err)
	w2.Rollback()
	res = testutil.Await(t, gotRange, "the reader's range")
	require.NoError(t, res.err)
	require.True(t, res.h.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// An upgrade is a wait that a pass follows as well: t1 and t3 hold a shared, t3 holds d, a plain
// handle holds c shared, and a plain shared range over [c, ∞) queues for t3's d; t1 asks c
// exclusive and queues behind the range, which does not wait for t1. Then t3 upgrades a, and so
// waits for t1; the range now waits for t1 through t3's wait, and t1 passes it. Its key is outside
// every range, yet the upgrade waits in the home shard, where a pass sees it: seen from its key's
// own shard, t1 would stay behind the range, and the upgrade would fail as a deadlock through it.
func TestOwnerPassesRangeRequestThatWaitsForItThroughAnUpgrade(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	t1, t3 := &testTxn{l: l, name: "t1"}, &testTxn{l: l, name: "t3"}
	ctx := context.Background()
	shared := testOptions{Shared: true}
	_, err := t1.Lock(ctx, []byte("a"), shared)
	require.NoError(t, err)
	_, err = t3.Lock(ctx, []byte("a"), shared)
	require.NoError(t, err)
	_, err = t3.Lock(ctx, []byte("d"), testOptions{})
	require.NoError(t, err)
	c, err := l.Lock(ctx, []byte("c"), shared)
	require.NoError(t, err)
	gotRange := rangeAsync(l, "c", "", shared, nil)
	waitRangesQueued(t, l, 1)
	gotC := txnLockResult(t, t1, []byte("c"), testOptions{})
	WaitQueued(t, l, []byte("c"), 1)

	gotUp := txnLockResult(t, t3, []byte("a"), testOptions{})
	require.Eventually(t, func() bool { return l.tab.Counts().Waiting == 3 || len(gotUp) > 0 }, testutil.Guard, time.Millisecond)
	select {
	case r := <-gotUp:
		t.Fatalf("t3's upgrade, which waits for t1's share of a and closes no cycle, returned: %v", r.err)
	default:
	}
	require.True(t, c.Release())
	res := testutil.Await(t, gotC, "t1's exclusive c, once the plain handle let go of it")
	require.NoError(t, res.err, "t1 passes the range, which waits for t1 through t3's upgrade")
	assert.True(t, testutil.NotReturned(gotRange), "the range waits for t3's d")
	t1.Rollback()
	require.NoError(t, testutil.Await(t, gotUp, "t3's upgrade, once t1 let go").err)
	t3.Rollback()
	res = testutil.Await(t, gotRange, "the range, once t3 let go")
	require.NoError(t, res.err)
	require.True(t, res.h.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// A request that another owner's request passes only through a range request it passes itself
// is not passed: t1 and t3 hold a shared, t2 holds d shared, an exclusive range over every key
// queues behind them, and t1 then t3 ask d exclusive. Both pass the range (it waits for their a);
// t1's request does not wait for the range, so t3's queues behind it, not ahead. Queued ahead, it
// would wait for the range once t3 let go of a, the range for t1's a, and t1 for t3's request: a
// cycle among owners that lock in key order, which failed t1 with a deadlock.
func TestOwnerDoesNotPassRequestThatPassesTheRangeItself(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	t1, t2, t3 := &testTxn{l: l, name: "t1"}, &testTxn{l: l, name: "t2"}, &testTxn{l: l, name: "t3"}
	ctx := context.Background()
	shared := testOptions{Shared: true}
	_, err := t1.Lock(ctx, []byte("a"), shared)
	require.NoError(t, err)
	d2, err := t2.Lock(ctx, []byte("d"), shared)
	require.NoError(t, err)
	a3, err := t3.Lock(ctx, []byte("a"), shared)
	require.NoError(t, err)
	gotRange, got1, got3 := queueRangeThenTwo(t, l, []byte("d"), t1, t3)

	require.True(t, a3.Release())
	require.True(t, d2.Release())
	res1 := testutil.Await(t, got1, "t1's exclusive d, once t2 let go")
	require.NoError(t, res1.err, "t1 waited behind nobody that waits for it")
	t1.Rollback()
	res := testutil.Await(t, gotRange, "the range, once t1 let go")
	require.NoError(t, res.err)
	require.True(t, res.h.Release())
	res3 := testutil.Await(t, got3, "t3's exclusive d, once the range let go")
	require.NoError(t, res3.err)
	t3.Rollback()
	assert.True(t, ProbeTableEmpty(l))
}

// A request that passed a range request because its owner held a key the range waits for stops
// passing it once its owner lets go of that key, and the requests queued behind it that the range
// waits for then pass it: t1 holds a shared, t2 holds c shared and t3 holds b shared; an exclusive
// range over every key queues behind them; t3 then t1 ask c exclusive, both passing the range, t1
// queued behind t3. Once t3 lets go of b, t3's request waits for the range and the range for t1's
// a: t1 left behind t3 would close a cycle among owners that lock in key order, which failed one
// of them with a deadlock. t1 is moved ahead of t3 and takes c once t2 lets go.
func TestOwnerPassesRequestThatStopsPassingWhenItsOwnerLetsGo(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	t1, t2, t3 := &testTxn{l: l, name: "t1"}, &testTxn{l: l, name: "t2"}, &testTxn{l: l, name: "t3"}
	ctx := context.Background()
	shared := testOptions{Shared: true}
	_, err := t1.Lock(ctx, []byte("a"), shared)
	require.NoError(t, err)
	b3, err := t3.Lock(ctx, []byte("b"), shared)
	require.NoError(t, err)
	c2, err := t2.Lock(ctx, []byte("c"), shared)
	require.NoError(t, err)
	gotRange, got3, got1 := queueRangeThenTwo(t, l, []byte("c"), t3, t1)

	require.True(t, b3.Release())
	require.True(t, c2.Release())
	res1 := testutil.Await(t, got1, "t1's exclusive c, once t2 let go")
	require.NoError(t, res1.err, "t1 waits behind nobody that waits for it once t3 let go of b")
	assert.True(t, testutil.NotReturned(got3), "t3 waits for the range now")
	t1.Rollback()
	res := testutil.Await(t, gotRange, "the range, once t1 let go")
	require.NoError(t, res.err)
	require.True(t, res.h.Release())
	res3 := testutil.Await(t, got3, "t3's exclusive c, once the range let go")
	require.NoError(t, res3.err)
	t3.Rollback()
	assert.True(t, ProbeTableEmpty(l))
}

// queueRangeThenTwo queues an exclusive range over every key, of an owner of its own, and then
// first's and second's exclusive requests for key, in that order, each queued before the next is
// made; it returns where the three results arrive.
func queueRangeThenTwo(t *testing.T, l *testLocker, key []byte, first, second *testTxn) (gotRange, got1, got2 <-chan lockResult) {
	t.Helper()
	gotRange = rangeAsync(l, "", "", testOptions{}, &testTxn{l: l, name: "t4"})
	waitRangesQueued(t, l, 1)
	got1 = txnLockResult(t, first, key, testOptions{})
	WaitQueued(t, l, key, 1)
	got2 = txnLockResult(t, second, key, testOptions{})
	WaitQueued(t, l, key, 2)
	return gotRange, got1, got2
}
