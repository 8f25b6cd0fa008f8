package locktable

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newRangeClaim returns a claim of l for the range [start, end), end nil for no bound, with o's
// flags, on behalf of owner (nil for none).
func (l *testLocker) newRangeClaim(start, end []byte, o testOptions, owner Owner) *Claim {
	h := &Claim{}
	l.ten.PrepareRange(h, owner, 0, start, end, o.ask())
	return h
}

// acquireRange is a range's Lock, and without wait its TryLock, on behalf of owner.
func (l *testLocker) acquireRange(ctx context.Context, start, end []byte, o testOptions, owner Owner, wait bool) (*Claim, error) {
	lease, timeout := cmp.Or(o.Lease, defaultLease), cmp.Or(o.Timeout, defaultTimeout)
	h := l.newRangeClaim(start, end, o, owner)
	if _, err := h.Acquire(ctx, lease, timeout, wait, false); err != nil {
		return nil, err
	}
	return h, nil
}

func (l *testLocker) TryLockRange(start, end string, o testOptions) (*Claim, error) {
	return l.acquireRange(context.Background(), []byte(start), endOf(end), o, nil, false)
}

func rangeAsync(l *testLocker, start, end string, o testOptions, owner Owner) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		h, err := l.acquireRange(context.Background(), []byte(start), endOf(end), o, owner, true)
		ch <- lockResult{h, err}
	}()
	return ch
}

// endOf is a test's range end: "" for no bound.
func endOf(end string) []byte {
	if end == "" {
		return nil
	}
	return []byte(end)
}

func waitRangesQueued(t *testing.T, l *testLocker, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return l.tab.QueuedRanges(0) == n }, 5*time.Second, time.Millisecond)
}

func TestRangeConflictsWithKeysAndRanges(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	b, err := l.TryLock([]byte("b"), testOptions{Shared: true})
	require.NoError(t, err)

	_, err = l.TryLockRange("a", "c", testOptions{})
	assert.ErrorIs(t, err, ErrLocked, "an exclusive range waits for a sharer inside it")
	ac, err := l.TryLockRange("a", "c", testOptions{Shared: true})
	require.NoError(t, err, "shared locks of one key set do not conflict")
	cx, err := l.TryLockRange("c", "", testOptions{})
	require.NoError(t, err, "a range beside another does not meet it")
	for _, k := range []string{"c", "zzz", "c\x00"} {
		_, err = l.TryLock([]byte(k), testOptions{Shared: true})
		assert.ErrorIs(t, err, ErrLocked, "%q is inside [c, ∞)", k)
	}
	_, err = l.TryLock([]byte("a"), testOptions{})
	assert.ErrorIs(t, err, ErrLocked, "an exclusive key waits for a shared range over it")
	bb, err := l.TryLock([]byte("b"), testOptions{Shared: true})
	require.NoError(t, err)
	_, err = l.TryLockRange("", "a\x00", testOptions{})
	assert.ErrorIs(t, err, ErrLocked, "[\"\", a\\0) meets [a, c)")
	x, err := l.TryLockRange("", "a", testOptions{})
	require.NoError(t, err, "[\"\", a) ends where [a, c) starts")

	for _, h := range []*Claim{b, ac, cx, bb, x} {
		require.True(t, h.Release())
	}
	assert.True(t, ProbeTableEmpty(l))
}

func TestKeyWaitsForRangeAndRangeForKey(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	r, err := l.TryLockRange("a", "c", testOptions{})
	require.NoError(t, err)
	got := lockAsync(context.Background(), l, []byte("b"), testOptions{})
	WaitQueued(t, l, []byte("b"), 1)
	require.True(t, r.Release())
	b := testutil.Await(t, got, "the key, once the range is released")
	require.NoError(t, b.err)

	gotRange := rangeAsync(l, "a", "", testOptions{}, nil)
	waitRangesQueued(t, l, 1)
	require.True(t, b.h.Release())
	res := testutil.Await(t, gotRange, "the range, once the key inside it is released")
	require.NoError(t, res.err)
	require.True(t, res.h.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// A queued range holds up newcomers it conflicts with, and no other.
func TestQueuedRangeDelaysOnlyWhatItConflictsWith(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	b, err := l.TryLock([]byte("b"), testOptions{})
	require.NoError(t, err)
	gotRange := rangeAsync(l, "a", "c", testOptions{}, nil)
	waitRangesQueued(t, l, 1)

	x, err := l.TryLock([]byte("x"), testOptions{})
	require.NoError(t, err, "a queued range over [a, c) does not delay x")
	_, err = l.TryLock([]byte("a"), testOptions{Shared: true})
	require.ErrorIs(t, err, ErrLocked, "a newcomer inside the queued range does not pass it")
	_, err = l.TryLockRange("b", "d", testOptions{Shared: true})
	require.ErrorIs(t, err, ErrLocked, "nor does a range that meets it")

	require.True(t, b.Release())
	res := testutil.Await(t, gotRange, "the range")
	require.NoError(t, res.err)
	require.True(t, res.h.Release())
	require.True(t, x.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// A column family's first range moves its held and queued keys, from every shard, under the
// range's home; they are released, granted and counted there as before.
func TestFirstRangeMovesTheKeysAlreadyThere(t *testing.T) {
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
	var held []*Claim
	var waiting []<-chan lockResult
	for i := range 64 {
		k := []byte(fmt.Sprintf("k%02d", i))
		h, err := l.TryLock(k, testOptions{})
		require.NoError(t, err)
		held = append(held, h)
		if i%8 == 0 {
			waiting = append(waiting, lockAsync(context.Background(), l, k, testOptions{}))
			WaitQueued(t, l, k, 1)
		}
	}
	require.Equal(t, 64, tab.Counts().Held)

	_, err := l.TryLockRange("k10", "k20", testOptions{Shared: true})
	assert.ErrorIs(t, err, ErrLocked, "the range sees the keys held before it")
	r, err := l.TryLockRange("k64", "", testOptions{})
	require.NoError(t, err)
	assert.Equal(t, 65, tab.Counts().Held)
	assert.Equal(t, len(waiting), tab.Counts().Waiting)
	_, err = l.TryLock([]byte("k65"), testOptions{})
	assert.ErrorIs(t, err, ErrLocked)

	for _, h := range held {
		require.True(t, h.Release())
	}
	for _, ch := range waiting {
		res := testutil.Await(t, ch, "a waiter queued before the move")
		require.NoError(t, res.err)
		require.True(t, res.h.Release())
	}
	require.True(t, r.Release())
	assert.True(t, ProbeTableEmpty(l))
}

func TestRangeLeaseLapsesAndPassesItsKeysOn(t *testing.T) {
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, newTestTable(t), clk)
	r, err := l.TryLockRange("a", "c", testOptions{Lease: time.Second})
	require.NoError(t, err)
	got := lockAsync(context.Background(), l, []byte("b"), testOptions{Timeout: time.Minute})
	WaitQueued(t, l, []byte("b"), 1)
	clk.Advance(time.Second)
	res := testutil.Await(t, got, "the key, at the range's deadline")
	require.NoError(t, res.err)
	assert.True(t, r.Now().Expired())
	assert.False(t, r.Release())
	assert.ErrorIs(t, r.Fence(func() error { panic("a fence ran its commit on a lapsed range") }), ErrLeaseExpired)
	require.True(t, res.h.Release())

	// A lapse nobody settled yet gives way to a newcomer, as a key's does.
	r, err = l.TryLockRange("a", "", testOptions{Lease: time.Second})
	require.NoError(t, err)
	clk.Advance(time.Second)
	k, err := l.TryLock([]byte("q"), testOptions{})
	require.NoError(t, err)
	assert.True(t, r.Now().Dead())
	require.True(t, k.Release())
	assert.True(t, ProbeTableEmpty(l))
}

func TestOwnLocksNeverConflict(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	txn := l.Begin()
	_, err := txn.Lock(context.Background(), []byte("b"), testOptions{})
	require.NoError(t, err)
	r, err := l.acquireRange(context.Background(), []byte("a"), []byte("c"), testOptions{}, txn, false)
	require.NoError(t, err, "a Txn's own locks never conflict with each other: a Txn's range over its own key")
	txn.claims = append(txn.claims, r)
	_, err = l.TryLock([]byte("b"), testOptions{Shared: true})
	assert.ErrorIs(t, err, ErrLocked)
	txn.Rollback()
	assert.True(t, ProbeTableEmpty(l))
}

func TestDeadlockThroughRangeAndKey(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	a, b := l.Begin(), l.Begin()
	a.name, b.name = "a", "b"
	_, err := a.Lock(context.Background(), []byte("k"), testOptions{})
	require.NoError(t, err)
	rb, err := l.acquireRange(context.Background(), []byte("r"), []byte("s"), testOptions{}, b, false)
	require.NoError(t, err)
	b.claims = append(b.claims, rb)

	aWaits := rangeAsync(l, "q", "t", testOptions{Timeout: time.Minute}, a)
	waitRangesQueued(t, l, 1)
	_, err = b.Lock(context.Background(), []byte("k"), testOptions{Timeout: time.Minute})
	var dl *DeadlockError
	require.ErrorAs(t, err, &dl, "b's wait for k closes b → a → b")
	assert.Len(t, dl.Cycle, 2)
	b.Rollback()
	res := testutil.Await(t, aWaits, "a's range once b rolled back")
	require.NoError(t, res.err)
	a.claims = append(a.claims, res.h)
	a.Rollback()
	assert.True(t, ProbeTableEmpty(l))
}

func TestRangeUpgradeWaitsForOtherSharers(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	txn := l.Begin()
	r, err := l.acquireRange(context.Background(), []byte("a"), []byte("c"), testOptions{Shared: true}, txn, false)
	require.NoError(t, err)
	txn.claims = append(txn.claims, r)
	other, err := l.TryLock([]byte("b"), testOptions{Shared: true})
	require.NoError(t, err)
	queued := rangeAsync(l, "a", "z", testOptions{}, nil)
	waitRangesQueued(t, l, 1)

	done := make(chan error, 1)
	go func() {
		_, err := r.Upgrade(context.Background(), time.Minute, false)
		done <- err
	}()
	waitRangesQueued(t, l, 2)
	select { // queued: its outcome is decided only when something changes
	case err := <-done:
		t.Fatalf("upgraded past a sharer of b: %v", err)
	default:
	}
	assert.NotZero(t, r.flags()&flagShared, "still shared while b's other sharer holds it")
	require.True(t, other.Release())
	require.NoError(t, testutil.Await(t, done, "the upgrade"))
	assert.Zero(t, r.flags()&flagShared, "the same handle is exclusive now")
	_, err = l.TryLock([]byte("b"), testOptions{Shared: true})
	assert.ErrorIs(t, err, ErrLocked)
	txn.Rollback()
	res := testutil.Await(t, queued, "the range queued before the upgrade, after it")
	require.NoError(t, res.err)
	require.True(t, res.h.Release())
	assert.True(t, ProbeTableEmpty(l))
}

func TestRangeWaitTimesOutAndChangesNothing(t *testing.T) {
	clk := NewManualClock(time.Unix(1, 0))
	l := newTestLocker(t, newTestTable(t), clk)
	k, err := l.TryLock([]byte("b"), testOptions{})
	require.NoError(t, err)
	got := rangeAsync(l, "a", "c", testOptions{Timeout: time.Second}, nil)
	waitRangesQueued(t, l, 1)
	behind := lockAsync(context.Background(), l, []byte("a"), testOptions{Timeout: time.Hour})
	WaitQueued(t, l, []byte("a"), 1)
	clk.Advance(time.Second)
	res := testutil.Await(t, got, "the range's timeout")
	assert.True(t, errors.Is(res.err, ErrTimeout), "%v", res.err)
	a := testutil.Await(t, behind, "the key the timed-out range held up")
	require.NoError(t, a.err)
	require.True(t, a.h.Release())
	require.True(t, k.Release())
	assert.True(t, ProbeTableEmpty(l))
}

// A range request waits for a conflicting key request queued before it, even where it conflicts
// with none of the key's holders (the rule, fairness): here b is held shared, a writer queues for
// it, and a shared range over b must not pass the writer.
func TestRangeWaitsForAKeyRequestQueuedBeforeIt(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	first, err := l.TryLockRange("x", "y", testOptions{}) // makes the column family's range space
	require.NoError(t, err)
	require.True(t, first.Release())
	reader, err := l.TryLock([]byte("b"), testOptions{Shared: true})
	require.NoError(t, err)
	writer := lockAsync(context.Background(), l, []byte("b"), testOptions{})
	testutil.WaitUntil(t, "the writer queues for b", func() bool { return l.tab.Counts().Waiting == 1 })
	_, err = l.TryLockRange("a", "c", testOptions{Shared: true})
	require.ErrorIs(t, err, ErrLocked, "a request is served after every conflicting request "+
		"queued before it; a shared range over b passed the writer queued for b")
	require.True(t, reader.Release())
	require.True(t, granted(t, writer, "the writer").Release())
	assert.True(t, ProbeTableEmpty(l))
}
