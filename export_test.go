package recordlock

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/require"
)

// The helper file of the white-box tests, and what the black-box tests of package
// recordlock_test may use of the internals; it exists only in the test binary. Every Probe… hook
// reads state without changing it, so that a test can assert that nothing was left behind.
// WaitQueued, Await, DBGet and LogCapture are the queue wait, the receive, the direct read and the
// log capture of both test packages; the rest of the black-box scaffolding is in helpers_test.go.

// ProbeTableEmpty reports whether l's key-lock table holds, queues and schedules nothing.
func ProbeTableEmpty(l *Locker) bool { return l.tab.empty() && ProbeDeadlines(l) == 0 }

// ProbeQueuedWaiters counts the Lock calls fully queued for key in l's table (see countWaiters).
func ProbeQueuedWaiters(l *Locker, key []byte) int {
	n, _ := countWaiters(l, key)
	return n
}

// ProbeWokenWaiters counts the queued Lock calls for key that were woken to take it.
func ProbeWokenWaiters(l *Locker, key []byte) int {
	_, n := countWaiters(l, key)
	return n
}

func countWaiters(l *Locker, key []byte) (queued, woken int) {
	hash := l.tab.hash(0, key)
	sh := l.tab.shard(hash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.index.find(hash, 0, key)
	if e == nil {
		return 0, 0
	}
	for w := e.head; w != nil; w = w.next {
		// A waiter counts once it is fully queued: its timers armed and, for a Txn, its wait-for
		// edge registered (as Stats.Waiting counts it), so that a test that goes on to close a
		// cycle is the one whose check finds it.
		if !w.counted {
			continue
		}
		queued++
		if w.state == waitWoken {
			woken++
		}
	}
	return queued, woken
}

// ProbeDeadlines counts the lease deadlines and wait timeouts scheduled in l's table, over every
// clock.
func ProbeDeadlines(l *Locker) int {
	n := 0
	for i := range l.tab.shards {
		sh := &l.tab.shards[i]
		sh.mu.Lock()
		sh.schedulers(func(s *scheduler) { n += len(s.heap) })
		sh.mu.Unlock()
	}
	return n
}

// ProbeSameShard reports whether two keys share a shard (and so a mutex and a timer) in l's table.
func ProbeSameShard(l *Locker, a, b []byte) bool {
	return l.tab.shard(l.tab.hash(0, a)) == l.tab.shard(l.tab.hash(0, b))
}

// KeyPerShard returns one key for each shard of l's table, each beginning with prefix, so that a
// test can reach every shard's timer.
func KeyPerShard(l *Locker, prefix string) [][]byte {
	keys := make([][]byte, shardCount)
	for i, found := 0, 0; found < shardCount; i++ {
		k := fmt.Appendf(nil, "%s%d", prefix, i)
		if s := l.tab.hash(0, k) & (shardCount - 1); keys[s] == nil {
			keys[s] = k
			found++
		}
	}
	return keys
}

// ProbeTimers counts the timers of c that are armed and have not run.
func ProbeTimers(c *ManualClock) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// ProbeClosed reports whether c is closed, without blocking.
func ProbeClosed(c <-chan struct{}) bool { return closed(c) }

// WaitQueued blocks until n Lock calls are queued for key in l's table, so that a test can start
// waiters in a known order. It is the queue wait of both test packages.
func WaitQueued(t testing.TB, l *Locker, key []byte, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return ProbeQueuedWaiters(l, key) == n },
		10*time.Second, 200*time.Microsecond, "waiting for %d queued waiters", n)
}

// Await receives from ch, failing the test if nothing arrives within txnTestGuard. It is the
// receive of both test packages.
func Await[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(txnTestGuard):
		t.Fatalf("%s did not happen within %v", what, txnTestGuard)
		panic("unreachable")
	}
}

// DBGet reads key straight from db's default column family; nil when it does not exist. It is
// the direct read of both test packages.
func DBGet(t testing.TB, db *grocksdb.DB, key string) []byte {
	t.Helper()
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	v, err := db.GetBytes(ro, []byte(key))
	require.NoError(t, err)
	return v
}

// LogCapture is a slog.Handler that keeps every record it is given at info level or above: the
// warnings the tests read. It leaves out debug records (lapses, deadlocks). It is the log
// capture of both test packages.
type LogCapture struct {
	mu   sync.Mutex
	recs []LogRecord
}

// LogRecord is what a LogCapture keeps of a record.
type LogRecord struct {
	Level string
	Msg   string
	Attrs map[string]string
}

func (c *LogCapture) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelInfo }

func (c *LogCapture) Handle(_ context.Context, r slog.Record) error {
	rec := LogRecord{Level: r.Level.String(), Msg: r.Message, Attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.String()
		return true
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, rec)
	return nil
}

func (c *LogCapture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *LogCapture) WithGroup(string) slog.Handler      { return c }

// Records returns the records kept so far, in order.
func (c *LogCapture) Records() []LogRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]LogRecord(nil), c.recs...)
}

// Kinds lists the kind attribute of every record kept, in order.
func (c *LogCapture) Kinds() []string {
	var ks []string
	for _, r := range c.Records() {
		ks = append(ks, r.Attrs["kind"])
	}
	return ks
}

// The white-box tests' own helpers.

// closed is ProbeClosed for the white-box tests.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// newTestLocker returns a Locker on db running on clk, closed at the end of the test.
func newTestLocker(t testing.TB, db *grocksdb.DB, clk Clock) *Locker {
	t.Helper()
	l, err := New(db, WithClock(clk))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// empty reports whether no key is held or waited on.
func (t *table) empty() bool {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n := sh.index.n
		sh.mu.Unlock()
		if n != 0 {
			return false
		}
	}
	return true
}

// schedulers calls f on every scheduler of the shard's taken clock slots.
func (sh *shard) schedulers(f func(*scheduler)) {
	if sh.firstSched.clock != nil {
		f(&sh.firstSched)
	}
	for _, s := range sh.moreScheds {
		if s != nil {
			f(s)
		}
	}
}

// sched is the scheduler of l's clock in the shard.
func (sh *shard) sched(l *Locker) *scheduler { return sh.scheduler(l.clockID) }

// heapLen is the number of deadlines l's shard for key keeps on l's clock.
func heapLen(l *Locker, key []byte) int {
	sh := l.tab.shard(l.tab.hash(0, key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return len(sh.sched(l).heap)
}

// keysInShard returns n distinct keys that all hash to the same shard of l's table.
func keysInShard(l *Locker, n int) [][]byte {
	var keys [][]byte
	for i := 0; len(keys) < n; i++ {
		k := []byte{byte(i), byte(i >> 8), byte(i >> 16), byte(i >> 24)}
		if l.tab.hash(0, k)&(shardCount-1) == 0 {
			keys = append(keys, k)
		}
	}
	return keys
}

// releaseWokenNotRun gives h's key back as Release does, leaving the oldest waiter woken to take
// it but not yet running: the window in which a newcomer may barge. The returned waiter's
// wake-up is held back until the test signals it.
func releaseWokenNotRun(t *testing.T, h *Handle) *waiter {
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
	e.wakePending = true
	e.head.state = waitWoken
	return e.head
}

// lockResult is what a Lock call started with lockAsync returned.
type lockResult struct {
	h   *Handle
	err error
}

// lockAsync starts l.Lock in a goroutine and returns where its result arrives.
func lockAsync(ctx context.Context, l *Locker, key []byte, opts Options) <-chan lockResult {
	c := make(chan lockResult, 1)
	go func() {
		h, err := l.Lock(ctx, key, opts)
		c <- lockResult{h, err}
	}()
	return c
}

// txnTestGuard bounds how long a test waits for something that must happen promptly.
const txnTestGuard = 10 * time.Second
