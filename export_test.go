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

	"github.com/recordlock/recordlock/internal/locktable"
)

// The helper file of the white-box tests, and what the black-box tests of package
// recordlock_test may use of the internals; it exists only in the test binary. Every Probe… hook
// reads state without changing it, so that a test can assert that nothing was left behind.
// WaitQueued, Await, DBGet and LogCapture are the queue wait, the receive, the direct read and the
// log capture of both test packages; the rest of the black-box scaffolding is in helpers_test.go.

// ProbeTableEmpty reports whether l's key-lock table holds, queues and schedules nothing.
func ProbeTableEmpty(l *Locker) bool { return l.tab.Empty() && ProbeDeadlines(l) == 0 }

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

func countWaiters(l *Locker, key []byte) (queued, woken int) { return l.tab.Queued(0, key) }

// ProbeDeadlines counts the lease deadlines and wait timeouts scheduled in l's table, over every
// clock.
func ProbeDeadlines(l *Locker) int { return l.tab.Deadlines() }

// ProbeSameShard reports whether two keys share a shard (and so a mutex and a timer) in l's table.
func ProbeSameShard(l *Locker, a, b []byte) bool {
	return l.tab.ShardOf(0, a) == l.tab.ShardOf(0, b)
}

// KeyPerShard returns one key for each key shard of l's table, each beginning with prefix, so that a
// test can reach every shard's timer.
func KeyPerShard(l *Locker, prefix string) [][]byte {
	keys := make([][]byte, locktable.KeyShards)
	for i, found := 0, 0; found < locktable.KeyShards; i++ {
		k := fmt.Appendf(nil, "%s%d", prefix, i)
		if s := l.tab.ShardOf(0, k); keys[s] == nil {
			keys[s] = k
			found++
		}
	}
	return keys
}

// ProbeTimers counts the timers of c that are armed and have not run.
func ProbeTimers(c *ManualClock) int { return locktable.PendingTimers(c) }

// WaitQueued blocks until n Lock calls are queued for key in l's table, so that a test can start
// waiters in a known order. It is the queue wait of both test packages.
func WaitQueued(t testing.TB, l *Locker, key []byte, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return ProbeQueuedWaiters(l, key) == n },
		10*time.Second, 200*time.Microsecond, "waiting for %d queued waiters", n)
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

// newTestLocker returns a Locker on db running on clk, closed at the end of the test.
func newTestLocker(t testing.TB, db *grocksdb.DB, clk Clock) *Locker {
	t.Helper()
	l, err := New(db, WithClock(clk))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
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

// WithoutRangeConflicts is an Option that turns off the range conflict check of the key-lock table
// of the Locker's database (locktable.Table.DisableRangeConflicts): a range lock then conflicts
// with no other lock. It acts on the table, so every Locker of the database runs without the
// check until the last of them closes and the table is dropped. A phantom test uses it to show
// that it catches the missing check.
func WithoutRangeConflicts() Option { return noRangeConflictsOption{} }

type noRangeConflictsOption struct{}

func (noRangeConflictsOption) apply(c *config) { c.failpoints.noRangeConflicts = true }
