package locktable

import (
	"cmp"
	"context"
	"flag"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The scaffolding of the table's tests, in one place: a tenant with the calls of a Locker
// (testLocker), the owners of the wait-for graph, and the probes, waits and receives the tests
// share; the tests' clock is the package's own ManualClock (manualclock.go). Every table a test makes is checked, when the test ends, to hold, queue and
// schedule nothing (newTestTable), so that no test has to say so.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// longStress runs the stress tests at full length: make stress passes -long, make test does not.
// Each stress test reads its counts through stressCount.
var longStress = flag.Bool("long", false, "run the stress tests at full length (make stress)")

// stressCount is the count of a stress loop: short in make test, enough to prove the invariant
// it checks, and full with -long.
func stressCount(short, full int) int {
	if *longStress {
		return full
	}
	return short
}

// The defaults of a testLocker's requests, those of the API's Options.
const (
	defaultLease   = 30 * time.Second
	defaultTimeout = 30 * time.Second
)

// newTestTable returns a table of its own for the test. When the test ends, after its tenants
// have closed (cleanups run last first), the table must hold, queue and schedule nothing.
func newTestTable(t testing.TB) *Table {
	t.Helper()
	tab := New("test", &Stamps{})
	t.Cleanup(func() {
		if !t.Failed() {
			require.True(t, tab.Empty(), "the table still holds or queues a key")
			require.Zero(t, tab.Deadlines(), "the table still schedules a deadline")
		}
	})
	return tab
}

// testOptions are a testLocker's request options: zero Lease and Timeout mean the defaults.
type testOptions struct {
	Lease, Timeout   time.Duration
	Shared           bool
	Hold, OwnerHolds bool // OwnerHolds: flagOwnerHolds, the owner holds other keys as it asks
}

// testLocker is a tenant of a table, with the lock calls of a Locker.
type testLocker struct {
	tab    *Table
	ten    Tenant
	closed sync.Once
}

// newTestLocker opens a tenant of tab on clk, closed at the end of the test.
func newTestLocker(t testing.TB, tab *Table, clk Clock) *testLocker {
	t.Helper()
	l := openTestLocker(tab, clk, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { l.Close() })
	return l
}

// newLocker opens a tenant of tab on clk, as New opens a Locker; the caller closes it.
func newLocker(tab *Table, clk Clock) (*testLocker, error) {
	return openTestLocker(tab, clk, slog.New(slog.DiscardHandler)), nil
}

// ProbeTableEmpty reports whether l's table holds, queues and schedules nothing.
func ProbeTableEmpty(l *testLocker) bool { return l.tab.Empty() && l.tab.Deadlines() == 0 }

// ProbeQueuedWaiters counts the requests fully queued for key in l's table.
func ProbeQueuedWaiters(l *testLocker, key []byte) int {
	n, _ := l.tab.Queued(0, key)
	return n
}

// ProbeWokenWaiters counts the queued requests for key that were woken to take it.
func ProbeWokenWaiters(l *testLocker, key []byte) int {
	_, n := l.tab.Queued(0, key)
	return n
}

// openTestLocker opens a tenant of tab on clk, logging to log; the caller closes it.
func openTestLocker(tab *Table, clk Clock, log *slog.Logger) *testLocker {
	l := &testLocker{tab: tab}
	tab.Open(&l.ten, clk, log)
	return l
}

// Close closes the tenant, once.
func (l *testLocker) Close() error {
	l.closed.Do(func() {
		l.ten.MarkClosed()
		l.ten.Shutdown()
	})
	return nil
}

// ask is what o asks for besides the record.
func (o testOptions) ask() Ask {
	var a Ask
	if o.OwnerHolds {
		a = AskOwnerHolds
	}
	if o.Shared {
		a |= AskShared
	}
	if o.Hold {
		a |= AskHold
	}
	return a
}

// newClaim returns a claim of l for key, with o's flags, on behalf of owner (nil for none).
func (l *testLocker) newClaim(key []byte, o testOptions, owner Owner) *Claim {
	h := &Claim{}
	l.ten.Prepare(h, owner, 0, key, o.ask())
	return h
}

// acquire is Lock, and without wait TryLock, on behalf of owner.
func (l *testLocker) acquire(ctx context.Context, key []byte, o testOptions, owner Owner, wait bool) (*Claim, error) {
	if l.ten.Closed() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lease, timeout := cmp.Or(o.Lease, defaultLease), cmp.Or(o.Timeout, defaultTimeout)
	h := l.newClaim(key, o, owner)
	if _, err := h.Acquire(ctx, lease, timeout, wait, false); err != nil {
		return nil, err
	}
	return h, nil
}

func (l *testLocker) Lock(ctx context.Context, key []byte, o testOptions) (*Claim, error) {
	return l.acquire(ctx, key, o, nil, true)
}

func (l *testLocker) TryLock(key []byte, o testOptions) (*Claim, error) {
	return l.acquire(context.Background(), key, o, nil, false)
}

// lockResult is what a lock call started with lockAsync returned.
type lockResult struct {
	h   *Claim
	err error
}

// lockAsync starts l.Lock in a goroutine and returns where its result arrives.
func lockAsync(ctx context.Context, l *testLocker, key []byte, o testOptions) <-chan lockResult {
	return ownerLockAsync(ctx, l, key, o, nil)
}

// ownerLockAsync is lockAsync on behalf of owner.
func ownerLockAsync(ctx context.Context, l *testLocker, key []byte, o testOptions, owner Owner) <-chan lockResult {
	c := make(chan lockResult, 1)
	go func() {
		h, err := l.acquire(ctx, key, o, owner, true)
		c <- lockResult{h, err}
	}()
	return c
}

// WaitQueued blocks until n requests are fully queued for key in l's table.
func WaitQueued(t testing.TB, l *testLocker, key []byte, n int) {
	t.Helper()
	require.Eventually(t, func() bool { q, _ := l.tab.Queued(0, key); return q == n },
		10*time.Second, 200*time.Microsecond, "waiting for %d queued waiters", n)
}

// granted receives a lock call's result from c and fails the test unless it succeeded.
func granted(t testing.TB, c <-chan lockResult, what string) *Claim {
	t.Helper()
	r := testutil.Await(t, c, what)
	require.NoError(t, r.err, what)
	return r.h
}

// sched is the scheduler of l's clock in the shard.
func (sh *shard) sched(l *testLocker) *scheduler { return sh.scheduler(l.ten.clockID) }

// heapLen is the number of deadlines l's shard for key keeps on l's clock.
func heapLen(l *testLocker, key []byte) int {
	sh := l.tab.shard(l.tab.hash(0, key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return len(sh.sched(l).heap)
}

// waitingOn counts the requests waiting in the shard of key (Counts.Waiting, of that shard alone),
// in O(1): a test that polls as each of thousands of waiters queues cannot afford to walk the
// queue or every shard.
func waitingOn(l *testLocker, key []byte) int {
	sh := l.tab.shard(l.tab.hash(0, key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.counts.waiting
}

// keysInShard returns n distinct keys that all hash to the same shard of l's table.
func keysInShard(l *testLocker, n int) [][]byte {
	var keys [][]byte
	for i := 0; len(keys) < n; i++ {
		k := []byte{byte(i), byte(i >> 8), byte(i >> 16), byte(i >> 24)}
		if l.tab.shard(l.tab.hash(0, k)) == &l.tab.shards[0] {
			keys = append(keys, k)
		}
	}
	return keys
}

// releaseWokenNotRun gives h's key back as Release does, leaving the oldest waiter woken to take
// it but not yet running: the window in which a newcomer may barge. The returned waiter's
// wake-up is held back until the test signals it.
func releaseWokenNotRun(t *testing.T, h *Claim) *waiter {
	t.Helper()
	sh := h.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := h.e
	require.Same(t, h, e.holder)
	require.NotNil(t, e.head)
	h.setFlags(flagReleased)
	h.clearFlags(flagHeld)
	sh.unschedule(h)
	e.holder = nil
	sh.held--
	e.wakePending = true
	e.head.state = waitWoken
	return e.head
}

// testTxn is an owner that locks as a Txn of the API does: re-entrant, upgrading a shared claim of
// its own for an exclusive request, and releasing every claim it took when it rolls back.
type testTxn struct {
	l      *testLocker
	name   string
	claims []*Claim
}

// Begin starts a Txn of l.
func (l *testLocker) Begin() *testTxn { return &testTxn{l: l} }

func (t *testTxn) Name() string { return t.name }

// Lock locks key for t, upgrading a shared claim of t on it for an exclusive request.
func (t *testTxn) Lock(ctx context.Context, key []byte, o testOptions) (*Claim, error) {
	for _, h := range t.claims {
		if string(h.key()) != string(key) || h.Now().Dead() {
			continue
		}
		if !o.Shared && h.Status().Shared() {
			timeout := o.Timeout
			if timeout == 0 {
				timeout = defaultTimeout
			}
			if _, err := h.Upgrade(ctx, timeout, false); err != nil {
				return nil, err
			}
		}
		return h, nil
	}
	o.OwnerHolds = slices.ContainsFunc(t.claims, func(h *Claim) bool { return !h.dead() }) // as Txns
	h, err := t.l.acquire(ctx, key, o, t, true)
	if err != nil {
		return nil, err
	}
	t.claims = append(t.claims, h)
	return h, nil
}

// txnLockResult starts txn.Lock in a goroutine and returns where its result arrives. txn must make
// no other call until it has; a test that ends first cancels the Lock and waits for it
// (testutil.Go), so txn's Rollback is a cleanup registered before, not a defer.
func txnLockResult(t testing.TB, txn *testTxn, key []byte, o testOptions) <-chan lockResult {
	c := make(chan lockResult, 1)
	testutil.Go(t, context.Background(), func(ctx context.Context) {
		h, err := txn.Lock(ctx, key, o)
		c <- lockResult{h, err}
	})
	return c
}

// cycleOf returns the owners and keys that err's cycle names, as "owner:key".
func cycleOf(t testing.TB, err error) []string {
	t.Helper()
	var dl *DeadlockError
	require.ErrorAs(t, err, &dl)
	var names []string
	for _, w := range dl.Cycle {
		names = append(names, w.Owner.Name()+":"+string(w.Key))
	}
	return names
}

// Rollback releases t's claims and ends t.
func (t *testTxn) Rollback() {
	for _, h := range t.claims {
		h.Disown(true)
	}
	t.claims = nil
}

// fence runs commit inside a fence of h, as the API's Fence does.
func fence(h *Claim, commit func() error) error {
	return h.Fence(commit)
}
