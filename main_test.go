package recordlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/internal/tempdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// epoch is the wall reading every ManualClock in these tests starts at.
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// openDB opens a fresh RocksDB in a temp dir, closed at the end of the test.
func openDB(t testing.TB) *grocksdb.DB { return tempdb.New(t) }

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

// waitQueued blocks until n Lock calls are queued for key in l's table, so that tests can start
// waiters in a known order.
func waitQueued(t testing.TB, l *recordlock.Locker, key []byte, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return recordlock.ProbeQueuedWaiters(l, key) == n },
		10*time.Second, 200*time.Microsecond, "waiting for %d queued waiters", n)
}

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

// result waits for the result of a Lock started with lockAsync; a Lock that never returns fails
// the test rather than hanging it.
func result(t testing.TB, c <-chan lockResult) lockResult {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Lock did not return")
		return lockResult{}
	}
}

// hookCounter is a release hook that counts its calls.
type hookCounter struct{ n atomic.Int32 }

func (c *hookCounter) hook() error { c.n.Add(1); return nil }
func (c *hookCounter) count() int  { return int(c.n.Load()) }

// joinHook gives h a release hook by joining a round minted now on clk, with the given lease.
func joinHook(t testing.TB, h *recordlock.Handle, clk recordlock.Clock, lease time.Duration, hook func() error) {
	t.Helper()
	require.True(t, h.JoinClusterRound(recordlock.Timestamp(clk.Now().UnixNano()), lease, clk.Mono(), hook))
}

// openCFDB opens a fresh RocksDB with the default column family and the ones named, and returns
// the handles of the named ones; all are closed at the end of the test.
func openCFDB(t testing.TB, names ...string) (*grocksdb.DB, []*grocksdb.ColumnFamilyHandle) {
	return tempdb.NewCF(t, names...)
}
