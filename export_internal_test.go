package recordlock

import (
	"testing"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/require"
)

// Hooks into the key-lock table for the black-box tests of package recordlock_test. They exist
// only in the test binary.

// TableEmpty reports whether l's key-lock table holds, queues and schedules nothing.
func TableEmpty(l *Locker) bool {
	if !l.tab.empty() {
		return false
	}
	for i := range l.tab.shards {
		sh := &l.tab.shards[i]
		sh.mu.Lock()
		n := 0
		sh.schedulers(func(s *scheduler) { n += len(s.heap) })
		sh.mu.Unlock()
		if n != 0 {
			return false
		}
	}
	return true
}

// QueuedWaiters counts the Lock calls queued for key in l's table.
func QueuedWaiters(l *Locker, key []byte) int {
	n, _ := countWaiters(l, key)
	return n
}

// WokenWaiters counts the queued Lock calls for key that were woken to take it.
func WokenWaiters(l *Locker, key []byte) int {
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
		queued++
		if w.state == waitWoken {
			woken++
		}
	}
	return queued, woken
}

// closed reports whether c is closed, without blocking.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Closed is closed, for the black-box tests.
func Closed(c <-chan struct{}) bool { return closed(c) }

// OpenTestDB opens a fresh RocksDB in a temp dir, closed at the end of the test.
func OpenTestDB(t testing.TB) *grocksdb.DB {
	t.Helper()
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	db, err := grocksdb.OpenDb(opts, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

// newTestLocker returns a Locker on db running on clk, closed at the end of the test.
func newTestLocker(t testing.TB, db *grocksdb.DB, clk Clock) *Locker {
	t.Helper()
	l, err := New(db, WithClock(clk))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// empty reports whether no key is held or waited on. Tests use it.
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
