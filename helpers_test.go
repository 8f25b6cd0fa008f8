package recordlock_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/internal/tempdb"
)

// The scaffolding of the black-box tests, in one place. The probes of the internals, the queue
// wait and the log capture, which the white-box tests share, are in export_test.go; every
// database comes from the internal/tempdb fixture.

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

// Options and bounds every test shares.

// epoch is the wall reading every ManualClock in these tests starts at.
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// wait are the options of a Lock that waits for a busy key far longer than any test needs.
var wait = recordlock.Options{Timeout: time.Minute}

// node is the options of most locks here: node scope, default lease and timeout.
var node = recordlock.Options{Scope: recordlock.ScopeNode}

// quiet drops the logs of Lockers whose release hooks are meant to fail: the fuzzed ones and
// the random soak.
var quiet = slog.New(slog.DiscardHandler)

// guard bounds how long a test waits for something that must happen promptly, so a regression
// fails the test instead of hanging it.
const guard = 10 * time.Second

// Databases, Lockers and clocks.

// openDB opens a fresh RocksDB in a temp dir, closed at the end of the test.
func openDB(t testing.TB) *grocksdb.DB { return tempdb.New(t) }

// openCFDB opens a fresh RocksDB with the default column family and the ones named, and returns
// the handles of the named ones; all are closed at the end of the test.
func openCFDB(t testing.TB, names ...string) (*grocksdb.DB, []*grocksdb.ColumnFamilyHandle) {
	return tempdb.NewCF(t, names...)
}

// newLocker returns a Locker on db, closed at the end of the test.
func newLocker(t testing.TB, db *grocksdb.DB, opts ...recordlock.Option) *recordlock.Locker {
	t.Helper()
	l, err := recordlock.New(db, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// manual returns a ManualClock and a Locker on db that runs on it.
func manual(t testing.TB, db *grocksdb.DB, opts ...recordlock.Option) (*recordlock.ManualClock, *recordlock.Locker) {
	t.Helper()
	clk := recordlock.NewManualClock(epoch)
	return clk, newLocker(t, db, append([]recordlock.Option{recordlock.WithClock(clk)}, opts...)...)
}

// lockerPair opens a fresh RocksDB with two Lockers on it that run on one ManualClock: l, the one a
// test works through, and other, which contends with it for the same keys.
func lockerPair(t testing.TB) (db *grocksdb.DB, clk *recordlock.ManualClock, l, other *recordlock.Locker) {
	t.Helper()
	db = openDB(t)
	clk, l = manual(t, db)
	return db, clk, l, newLocker(t, db, recordlock.WithClock(clk))
}

// frozenTimers is a ManualClock whose timers never fire, so only lazy checks can end a lease.
type frozenTimers struct{ *recordlock.ManualClock }

func (frozenTimers) AfterFunc(time.Duration, func()) recordlock.Timer { return deadTimer{} }

type deadTimer struct{}

func (deadTimer) Stop() bool { return true }

// Waiting for what other goroutines do.

// waitQueued blocks until n Lock calls are queued for key in l's table, so that a test can start
// waiters in a known order (the queue wait of both test packages, in export_test.go).
var waitQueued = recordlock.WaitQueued

// lockResult is what a Lock call started in a goroutine returned.
type lockResult struct {
	h   *recordlock.Handle
	err error
}

// lockAsync starts l.Lock in a goroutine and returns where its result arrives.
func lockAsync(ctx context.Context, l *recordlock.Locker, key []byte, opts recordlock.Options) <-chan lockResult {
	c := make(chan lockResult, 1)
	go func() {
		h, err := l.Lock(ctx, key, opts)
		c <- lockResult{h, err}
	}()
	return c
}

// txnLockAsync starts txn.Lock in a goroutine and returns where its result arrives. Like every
// call on a Txn that these helpers start, it runs under testutil.Go: a test that ends before it
// returns cancels it and waits for it before the Txn's Rollback, which is therefore a cleanup
// (txnNamed's, or t.Cleanup), not a defer. A Txn is used by one goroutine.
func txnLockAsync(t testing.TB, txn *recordlock.Txn, key []byte, opts recordlock.Options) <-chan lockResult {
	return txnLockCtxAsync(t, context.Background(), txn, key, opts)
}

// lockAllResult is what a LockAll call started with lockAllAsync returned.
type lockAllResult struct {
	hs  []*recordlock.Handle
	err error
}

// lockAllAsync starts txn.LockAll in a goroutine and returns where its result arrives (see
// txnLockAsync).
func lockAllAsync(t testing.TB, ctx context.Context, txn *recordlock.Txn, opts recordlock.Options, keys ...[]byte) <-chan lockAllResult {
	c := make(chan lockAllResult, 1)
	testutil.Go(t, ctx, func(ctx context.Context) {
		hs, err := txn.LockAll(ctx, opts, keys...)
		c <- lockAllResult{hs, err}
	})
	return c
}

// granted awaits a Lock started with lockAsync or txnLockAsync, requires that it succeeded, and
// returns its handle.
func granted(t testing.TB, c <-chan lockResult, what string) *recordlock.Handle {
	t.Helper()
	r := testutil.Await(t, c, what)
	require.NoError(t, r.err, what)
	return r.h
}

// Release hooks and coordinators.

// hookCounter is a release hook that counts its calls.
type hookCounter struct{ n atomic.Int32 }

func (c *hookCounter) hook() error { c.n.Add(1); return nil }
func (c *hookCounter) count() int  { return int(c.n.Load()) }

// joinHook gives h a release hook by joining a round minted now on clk, with the given lease.
func joinHook(t testing.TB, h *recordlock.Handle, clk recordlock.Clock, lease time.Duration, hook func() error) {
	t.Helper()
	require.True(t, h.JoinClusterRound(recordlock.Timestamp(clk.Now().UnixNano()), lease, clk.Mono(), hook))
}

// testCoord is a small in-process Coordinator written for these tests. It counts calls and
// concurrent calls per key, stamps rounds from the clock it is given (MintedMono is read after the
// gate, before the "request" that grants, which the during hook stands for), keeps a fencing token per key, and lets a test hold
// Acquire at a gate, fail it, or recall the last admission of a key.
//
// It also keeps the rounds of each record (column family name and key) that are live, granted
// and not released, with the node that asked (testCoord itself is node "", node returns the
// Coordinator of another node), and refuses, with errHeldElsewhere, a round that another node's
// live round of the record excludes: an exclusive round while another node holds any, a shared
// one while another node holds it exclusively. A node's own rounds never exclude each other: its
// table orders its holders, and a Txn's upgrade asks for its exclusive round while it still holds
// its shared one.
type testCoord struct {
	clock recordlock.Clock
	stamp func() recordlock.Timestamp

	mu          sync.Mutex
	calls       int
	inFlight    map[string]int
	maxInFlight int
	tokens      map[string]uint64
	last        map[string]func() // revoke of the last admission per key
	current     func()            // revoke of the Acquire in progress
	releases    int
	requests    []recordlock.Request // every Acquire's request, its key copied
	live        map[string][]*liveRound
	released    map[string]int // releases of each round, by its key and token (roundID)

	gate    chan struct{}        // when set, Acquire waits for it to close (or for ctx)
	entered chan context.Context // when set, Acquire sends its ctx here on entry
	err     error                // when set, Acquire fails with it (after the gate)
	during  func()               // when set, runs after the gate, before the round is made
	yield   bool                 // when set, Acquire yields the processor to widen races
	// mintedBefore is how long before its Acquire a round says it was minted, as a round from a
	// delegation the node already holds may.
	mintedBefore time.Duration
}

// liveRound is a round testCoord granted and nobody released yet.
type liveRound struct {
	node   string
	shared bool
	token  uint64
}

// errHeldElsewhere is testCoord's refusal of a round another node's live round excludes.
var errHeldElsewhere = errors.New("testCoord: the record is held on another node")

// nodeCoord is testCoord as another node's Coordinator.
type nodeCoord struct {
	c    *testCoord
	name string
}

// node returns the Coordinator of the node called name, which shares c's records and tokens.
func (c *testCoord) node(name string) recordlock.Coordinator { return nodeCoord{c, name} }

func (n nodeCoord) Acquire(ctx context.Context, req recordlock.Request) (recordlock.Round, error) {
	return n.c.acquire(ctx, req, n.name)
}

func (c *testCoord) Acquire(ctx context.Context, req recordlock.Request) (recordlock.Round, error) {
	return c.acquire(ctx, req, "")
}

// recordName names a record as the cluster does: by column family name and key.
func recordName(cf string, key []byte) string { return cf + "\x00" + string(key) }

// roundID names a round by its key and token.
func roundID(key string, token uint64) string { return fmt.Sprintf("%s#%d", key, token) }

func (c *testCoord) acquire(ctx context.Context, req recordlock.Request, node string) (recordlock.Round, error) {
	k, revoke := string(req.Key), req.Revoke
	c.mu.Lock()
	c.calls++
	req.Key = slices.Clone(req.Key)
	c.requests = append(c.requests, req)
	c.inFlight[k]++
	c.maxInFlight = max(c.maxInFlight, c.inFlight[k])
	c.current = revoke
	gate, entered, err, during := c.gate, c.entered, c.err, c.during
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.inFlight[k]--
		c.mu.Unlock()
	}()
	if c.yield {
		runtime.Gosched()
	}
	if entered != nil {
		entered <- ctx
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return recordlock.Round{}, ctx.Err()
		}
	}
	if err != nil {
		return recordlock.Round{}, err
	}
	minted := c.clock.Mono() // as a real coordinator does, before the request that grants
	if during != nil {
		during()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	rec := recordName(req.ColumnFamily, req.Key)
	for _, o := range c.live[rec] {
		if o.node != node && !(o.shared && req.Shared) {
			return recordlock.Round{}, errHeldElsewhere
		}
	}
	c.tokens[k]++
	c.last[k] = revoke
	lr := &liveRound{node: node, shared: req.Shared, token: c.tokens[k]}
	c.live[rec] = append(c.live[rec], lr)
	id := roundID(k, lr.token)
	return recordlock.Round{
		TsR:        c.stamp(),
		MintedMono: minted - c.mintedBefore,
		Token:      lr.token,
		Release: func() error {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.released[id]++
			if c.released[id] > 1 {
				return errors.New("round released twice")
			}
			c.live[rec] = slices.DeleteFunc(c.live[rec], func(x *liveRound) bool { return x == lr })
			c.releases++
			return nil
		},
	}, nil
}

// releasesOf is how many times the round of key with token was released.
func (c *testCoord) releasesOf(key string, token uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.released[roundID(key, token)]
}

// liveOf returns the live rounds of key in column family cf.
func (c *testCoord) liveOf(cf, key string) []liveRound {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []liveRound
	for _, r := range c.live[recordName(cf, []byte(key))] {
		out = append(out, *r)
	}
	return out
}

// lastRequest returns the request of the latest Acquire.
func (c *testCoord) lastRequest(t testing.TB) recordlock.Request {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	require.NotEmpty(t, c.requests, "the coordinator was never asked")
	return c.requests[len(c.requests)-1]
}

// recall calls the revoke of key's last admission, as a coordinator does when another node asks.
func (c *testCoord) recall(key string) {
	c.mu.Lock()
	revoke := c.last[key]
	c.mu.Unlock()
	revoke()
}

func (c *testCoord) counts() (calls, releases int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls, c.releases
}

func newTestCoord(clock recordlock.Clock, stamp func() recordlock.Timestamp) *testCoord {
	return &testCoord{
		clock:    clock,
		stamp:    stamp,
		inFlight: map[string]int{},
		tokens:   map[string]uint64{},
		last:     map[string]func(){},
		live:     map[string][]*liveRound{},
		released: map[string]int{},
	}
}

// notifyClock is a ManualClock that reports every timer armed on it, so a test knows when a
// Lock has queued or armed its cluster budget before it moves time.
type notifyClock struct {
	*recordlock.ManualClock
	armed chan time.Duration
}

func (c notifyClock) AfterFunc(d time.Duration, f func()) recordlock.Timer {
	t := c.ManualClock.AfterFunc(d, f)
	c.armed <- d
	return t
}

// requireFree checks that key is not held or waited on in db's table: a node-scoped TryLock
// from l succeeds.
func requireFree(t *testing.T, l *recordlock.Locker, key string) {
	t.Helper()
	h, err := l.TryLock([]byte(key), recordlock.Options{Scope: recordlock.ScopeNode})
	require.NoError(t, err, "the local key should have been given back")
	require.True(t, h.Release())
}

// blockingCoord is a Coordinator whose Acquire waits for its ctx, or, with revokeFirst, recalls
// the admission before it returns a round.
type blockingCoord struct {
	clock       recordlock.Clock
	entered     chan struct{}
	revokeFirst bool
}

func (c *blockingCoord) Acquire(ctx context.Context, req recordlock.Request) (recordlock.Round, error) {
	revoke := req.Revoke
	round := recordlock.Round{TsR: recordlock.Timestamp(c.clock.Now().UnixNano()), MintedMono: c.clock.Mono(), Release: func() error { return nil }}
	if c.revokeFirst {
		revoke()
		return round, nil
	}
	close(c.entered)
	<-ctx.Done()
	return recordlock.Round{}, ctx.Err()
}

// grantAll is a coordinator that admits every request at once, for scope tests.
type grantAll struct{ clk *recordlock.ManualClock }

func (g grantAll) Acquire(context.Context, recordlock.Request) (recordlock.Round, error) {
	return recordlock.Round{TsR: recordlock.Timestamp(g.clk.Now().UnixNano()), MintedMono: g.clk.Mono()}, nil
}

// Records read and written straight through RocksDB, and Txns.

// dbGet reads key straight from RocksDB; nil when it does not exist (the direct read of both
// test packages, in export_test.go).
var dbGet = recordlock.DBGet

// dbPut writes key=value straight to RocksDB, outside any lock.
func dbPut(t testing.TB, db *grocksdb.DB, key, value string) {
	t.Helper()
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	require.NoError(t, db.Put(wo, []byte(key), []byte(value)))
}

// cfGet reads key of column family cf straight from RocksDB; nil when it does not exist.
func cfGet(t testing.TB, db *grocksdb.DB, cf *grocksdb.ColumnFamilyHandle, key string) []byte {
	t.Helper()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	s, err := db.GetCF(ro, cf, []byte(key))
	require.NoError(t, err)
	defer s.Free()
	if !s.Exists() {
		return nil
	}
	return append([]byte{}, s.Data()...)
}

// account is the key of account i in the transfer tests.
func account(i int) []byte { return fmt.Appendf(nil, "acct:%02d", i) }

// beginUnlocked begins a Txn that may also write keys it did not lock, as plain writes.
func beginUnlocked(t testing.TB, l *recordlock.Locker) *recordlock.Txn {
	t.Helper()
	txn, err := l.BeginTx(recordlock.TxnOptions{AllowUnlockedWrites: true})
	require.NoError(t, err)
	return txn
}

// txnNamed begins a Txn with the given name, rolled back at the end of the test.
func txnNamed(t testing.TB, l *recordlock.Locker, name string) *recordlock.Txn {
	t.Helper()
	txn, err := l.BeginTx(recordlock.TxnOptions{Name: name})
	require.NoError(t, err)
	t.Cleanup(txn.Rollback)
	return txn
}

// shared and sharedWait ask for a shared lock, the second waiting up to a minute.
var (
	shared     = recordlock.Options{Shared: true}
	sharedWait = recordlock.Options{Shared: true, Timeout: time.Minute}
)

// pendingLock reports that a Lock started with lockAsync has not returned, without taking its
// result: the result channel is buffered, so a Lock that returned has left its result there.
func pendingLock(c <-chan lockResult) bool { return len(c) == 0 }

// txnLockCtxAsync starts txn.Lock with ctx in a goroutine and returns where its result arrives
// (see txnLockAsync).
func txnLockCtxAsync(t testing.TB, ctx context.Context, txn *recordlock.Txn, key []byte, opts recordlock.Options) <-chan lockResult {
	c := make(chan lockResult, 1)
	testutil.Go(t, ctx, func(ctx context.Context) {
		h, err := txn.Lock(ctx, key, opts)
		c <- lockResult{h, err}
	})
	return c
}

// waitingCount blocks until l's Stats report n waiting Lock calls (a Txn's wait counts once its
// deadlock check is done).
func waitingCount(t testing.TB, l *recordlock.Locker, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return l.Stats().Waiting == n },
		10*time.Second, 200*time.Microsecond, "waiting for %d waiting calls", n)
}

// txnUnderSharedRangeWithWaiter begins a Txn that holds the shared range [m, p), and queues another
// Locker's exclusive request for n behind that range. It returns the Txn (rolled back when the
// test ends), its range's handle and the queued request.
func txnUnderSharedRangeWithWaiter(t *testing.T) (*recordlock.Txn, *recordlock.Handle, <-chan lockResult) {
	t.Helper()
	_, _, l, other := lockerPair(t)
	txn := l.Begin()
	t.Cleanup(txn.Rollback)
	s, err := txn.LockRange(context.Background(), rng("m", "p"), shared)
	require.NoError(t, err)
	queued := lockAsync(context.Background(), other, []byte("n"), wait)
	waitingCount(t, l, 1)
	return txn, s, queued
}
