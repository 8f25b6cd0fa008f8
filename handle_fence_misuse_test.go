package recordlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// fenceMisuseTarget is a lock whose Fence a test's commit misuses: a lock of one key, or a
// range lock, and a key of it that another caller tries to take.
type fenceMisuseTarget struct {
	name  string
	lock  func(*recordlock.Locker) (*recordlock.Handle, error)
	probe []byte
}

var fenceMisuseTargets = []fenceMisuseTarget{
	{"key", func(l *recordlock.Locker) (*recordlock.Handle, error) {
		return l.TryLock([]byte("k"), recordlock.Options{Lease: time.Minute})
	}, []byte("k")},
	{"range", func(l *recordlock.Locker) (*recordlock.Handle, error) {
		return l.TryLockRange(recordlock.Range{Start: []byte("a"), End: []byte("m")}, recordlock.Options{Lease: time.Minute})
	}, []byte("c")},
}

// fenceMisuseLocker is a Locker on a ManualClock whose Close the test awaits, so that a Close that
// blocks fails the test instead of hanging its cleanup.
func fenceMisuseLocker(t *testing.T) (*recordlock.ManualClock, *recordlock.Locker) {
	t.Helper()
	clk := recordlock.NewManualClock(epoch)
	l, err := recordlock.New(openDB(t), recordlock.WithClock(clk))
	require.NoError(t, err)
	return clk, l
}

// closeWithin closes l and requires Close to return.
func closeWithin(t *testing.T, l *recordlock.Locker) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	require.NoError(t, testutil.Await(t, closed, "Close after a misused Fence"))
}

// Release or RevokeLease called by a commit on its own handle takes effect when the commit
// returns: it neither blocks nor lets the key pass while the commit runs, and afterwards the key
// is free and Close returns.
func TestFenceCommitReleasingItsOwnHandle(t *testing.T) {
	calls := map[string]func(*recordlock.Handle) bool{
		"Release":     (*recordlock.Handle).Release,
		"RevokeLease": func(h *recordlock.Handle) bool { h.RevokeLease(); return true },
	}
	for _, target := range fenceMisuseTargets {
		for name, call := range calls {
			t.Run(target.name+"/"+name, func(t *testing.T) {
				clk, l := fenceMisuseLocker(t)
				h, err := target.lock(l)
				require.NoError(t, err)
				var hooks hookCounter
				joinHook(t, h, clk, time.Minute, hooks.hook)

				var inside struct {
					ok, expired, leaseExpired, done bool
					successor                       error
				}
				fenced := make(chan error, 1)
				go func() {
					fenced <- h.Fence(func() error {
						inside.ok = call(h)
						inside.expired = h.IsExpired()
						inside.leaseExpired = h.IsLeaseExpired()
						inside.done = testutil.Closed(h.Done())
						_, inside.successor = l.TryLock(target.probe, recordlock.Options{})
						return nil
					})
				}()
				require.NoError(t, testutil.Await(t, fenced, "Fence whose commit calls "+name+" on its handle"))

				assert.True(t, inside.ok, "%s inside the commit", name)
				assert.True(t, inside.expired, "the handle stops authorizing writes at once")
				assert.Equal(t, name == "RevokeLease", inside.leaseExpired, "only a revocation ends the lease")
				assert.True(t, inside.done, "Done closes at once")
				require.ErrorIs(t, inside.successor, recordlock.ErrLocked, "the key passes on only when the commit returns")
				assert.Equal(t, 1, hooks.count(), "the release hook fired once the commit returned")
				assert.False(t, h.Release(), "a second Release gives back nothing")

				h2, err := l.TryLock(target.probe, recordlock.Options{})
				require.NoError(t, err, "the key is free once the commit returned")
				require.True(t, h2.Release())
				assert.True(t, recordlock.ProbeTableEmpty(l))
				closeWithin(t, l)
			})
		}
	}
}

// A Fence nested in the commit of a Fence on the same handle would wait for itself: it panics,
// naming the misuse, and the outer Fence ends as the panic passes through it, so the handle can
// still be released and the Locker closed.
func TestFenceNestedOnTheSameHandlePanics(t *testing.T) {
	for _, target := range fenceMisuseTargets {
		t.Run(target.name, func(t *testing.T) {
			_, l := fenceMisuseLocker(t)
			h, err := target.lock(l)
			require.NoError(t, err)

			innerRan := false
			recovered := make(chan any, 1)
			go func() {
				defer func() { recovered <- recover() }()
				_ = h.Fence(func() error {
					return h.Fence(func() error { innerRan = true; return nil })
				})
			}()
			p := testutil.Await(t, recovered, "a Fence nested in a commit on the same handle")
			require.NotNil(t, p, "a Fence in the commit of a Fence on the same handle panics rather than waiting for itself")
			assert.Contains(t, fmt.Sprint(p), "recordlock: Fence called inside the commit of a Fence on the same handle")
			assert.False(t, innerRan, "the nested commit never runs")

			require.NoError(t, h.Fence(func() error { return nil }), "the outer fence ended with the panic")
			require.True(t, h.Release())
			h2, err := l.Lock(context.Background(), target.probe, recordlock.Options{Timeout: time.Second})
			require.NoError(t, err)
			require.True(t, h2.Release())
			closeWithin(t, l)
		})
	}
}

// Inside a commit no Release waits for a Fence's commit, even one that another goroutine runs
// on another handle: the caller cannot be told from that commit's own. The release takes effect
// at once, and the key passes on only when the other commit returns.
func TestFenceCommitReleasingAnotherFencedHandle(t *testing.T) {
	_, l := fenceMisuseLocker(t)
	mine, err := l.TryLock([]byte("mine"), recordlock.Options{})
	require.NoError(t, err)
	theirs, err := l.TryLock([]byte("theirs"), recordlock.Options{})
	require.NoError(t, err)

	entered, finish := make(chan struct{}), make(chan struct{})
	theirCommit := make(chan error, 1)
	go func() {
		theirCommit <- theirs.Fence(func() error {
			close(entered)
			<-finish
			return nil
		})
	}()
	<-entered
	var released bool
	var successor error
	myCommit := make(chan error, 1)
	go func() {
		myCommit <- mine.Fence(func() error {
			released = theirs.Release()
			_, successor = l.TryLock([]byte("theirs"), recordlock.Options{})
			return nil
		})
	}()
	require.NoError(t, testutil.Await(t, myCommit, "a commit releasing a handle fenced in another goroutine"))
	assert.True(t, released, "the release took effect")
	assert.True(t, theirs.IsExpired(), "the released handle stops authorizing writes")
	require.ErrorIs(t, successor, recordlock.ErrLocked, "the key does not pass while the other commit runs")

	close(finish)
	require.NoError(t, testutil.Await(t, theirCommit, "the other goroutine's commit"))
	h, err := l.TryLock([]byte("theirs"), recordlock.Options{})
	require.NoError(t, err, "the key passes on when the other commit returns")
	require.True(t, h.Release())
	require.True(t, mine.Release())
	closeWithin(t, l)
}

// A commit deep in calls of its own still finds that it is inside its fence: a Release of its
// own handle from 100 frames down takes effect when the commit returns instead of waiting for it.
func TestFenceCommitReleasingItsHandleFromDeepInItsCalls(t *testing.T) {
	_, l := fenceMisuseLocker(t)
	h, err := l.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err)
	var descend func(depth int) bool
	descend = func(depth int) bool {
		if depth == 0 {
			return h.Release()
		}
		return descend(depth - 1)
	}
	var released bool
	fenced := make(chan error, 1)
	go func() { fenced <- h.Fence(func() error { released = descend(100); return nil }) }()
	require.NoError(t, testutil.Await(t, fenced, "a Fence whose commit releases its handle 100 frames down"))
	assert.True(t, released)
	h2, err := l.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err, "the key is free once the commit returned")
	require.True(t, h2.Release())
	closeWithin(t, l)
}

// Txn.Commit inside a Fence on one of the Txn's handles would fence that handle again, and wait
// for itself: it panics as a nested Fence does, and Rollback still frees the key.
func TestTxnCommitInsideFenceOfItsHandlePanics(t *testing.T) {
	_, l := fenceMisuseLocker(t)
	txn := l.Begin()
	h, err := txn.Lock(context.Background(), []byte("k"), recordlock.Options{})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("k"), []byte("v")))

	recovered := make(chan any, 1)
	go func() {
		defer func() { recovered <- recover() }()
		_ = h.Fence(txn.Commit)
	}()
	p := testutil.Await(t, recovered, "Txn.Commit inside a Fence of its handle")
	require.NotNil(t, p, "Commit panics")
	assert.Contains(t, fmt.Sprint(p), "recordlock: Txn.Commit called inside the commit of a Fence on one of its handles")

	txn.Rollback()
	h2, err := l.TryLock([]byte("k"), recordlock.Options{})
	require.NoError(t, err, "the key is free after Rollback")
	require.True(t, h2.Release())
	closeWithin(t, l)
}

// Close called by a commit returns, whether the fence's handle still held its key or was released
// before the fence began (a fence Close would otherwise wait for, ending only once Close
// returned); the commit returns after it, and the key can be taken again.
func TestFenceCommitClosingItsLocker(t *testing.T) {
	for _, released := range []bool{false, true} {
		t.Run(fmt.Sprintf("released=%v", released), func(t *testing.T) {
			db := openDB(t)
			l, err := recordlock.New(db)
			require.NoError(t, err)
			h, err := l.TryLock([]byte("k"), recordlock.Options{Lease: time.Minute})
			require.NoError(t, err)
			if released {
				require.True(t, h.Release())
			}
			fenced := make(chan error, 1)
			go func() {
				fenced <- h.Fence(func() error { return l.Close() })
			}()
			require.NoError(t, testutil.Await(t, fenced, "a Fence whose commit closes its Locker"))
			other, err := recordlock.New(db)
			require.NoError(t, err)
			again, err := other.TryLock([]byte("k"), recordlock.Options{})
			require.NoError(t, err, "the key is free once the commit returned")
			require.True(t, again.Release())
			require.NoError(t, other.Close())
		})
	}
}
