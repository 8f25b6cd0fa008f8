package locktable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The exception to the order of arrival (rangepass.go): a request of an owner never waits behind a
// queued request that waits for a lock of that owner.

// ownerTryRange is TryLockRange on behalf of owner.
func ownerTryRange(l *testLocker, start, end string, o testOptions, owner Owner) (*Hold, error) {
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
	res := Await(t, gotRange, "the reader's range, once the writer let go")
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
	res := Await(t, gotRange, "the range, once p/a is released")
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
	res := Await(t, got, "the other's shared k0, once the owner let go")
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
	resA := Await(t, gotA, "the owner's exclusive k0, once the other sharer left")
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
	resB := Await(t, gotB, "the other's exclusive k0")
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

	for _, h := range []*Hold{held, over, key, beside} {
		require.True(t, h.Release())
	}
	for _, ch := range []<-chan lockResult{gotKey, gotRange} {
		res := Await(t, ch, "a request the owner passed, once it let go")
		require.NoError(t, res.err)
		require.True(t, res.h.Release())
	}
	a.Rollback()
	assert.True(t, ProbeTableEmpty(l))
}
