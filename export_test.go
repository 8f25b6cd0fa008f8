package recordlock

import (
	"testing"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/require"
)

// What the black-box tests of package recordlock_test may see of the internals. These exist only
// in the test binary. Every hook is named Probe… and reads state without changing it, so a test
// can assert that nothing was left behind.

// ProbeTableEmpty reports whether l's key-lock table holds, queues and schedules nothing.
func ProbeTableEmpty(l *Locker) bool { return l.tab.empty() && ProbeDeadlines(l) == 0 }

// ProbeQueuedWaiters counts the Lock calls queued for key in l's table.
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

// ProbeTimers counts the timers of c that are armed and have not run.
func ProbeTimers(c *ManualClock) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// ProbeClosed reports whether c is closed, without blocking.
func ProbeClosed(c <-chan struct{}) bool { return closed(c) }

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
