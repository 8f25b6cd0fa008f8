package recordlock

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linxGnu/grocksdb"
)

// Release hooks run outside every table lock; their failures are contained and reported at a
// limited rate (docs/DESIGN.md §10).

// hookWarnInterval is how often one kind of release-hook failure is logged per Locker.
const hookWarnInterval = 60 * time.Second

// Locker issues record locks on the keys of one RocksDB database. Every Locker made for the same
// database in this process shares one key-lock table, so they exclude each other. A Locker is
// safe for concurrent use.
type Locker struct {
	db      *grocksdb.DB
	tab     *table
	clock   Clock
	clockID int // the slot of clock among the table's clocks
	log     *slog.Logger
	opts    resolvedCache
	hooks   testHooks

	closed    atomic.Bool
	closeOnce sync.Once
	// closing is cancelled when Close begins, to call off the coordinator requests in flight.
	closing context.Context
	cancel  context.CancelFunc
	strays  strayFences

	warnMu   sync.Mutex
	lastWarn map[string]time.Duration // Mono of the last warning per kind of hook failure
}

// runHook calls a release hook; a panic or error never escapes, it is logged at a limited rate.
func (l *Locker) runHook(fn func() error) {
	defer func() {
		if p := recover(); p != nil {
			l.tab.hookFailures.Add(1)
			l.warnHook("panic", fmt.Errorf("%v", p))
		}
	}()
	if err := fn(); err != nil {
		l.tab.hookFailures.Add(1)
		l.warnHook("error", err)
	}
}

// warnHook logs one line per kind of failure per hookWarnInterval of this Locker's clock. It is
// rate-limited rather than latched so that a fault that persists keeps being reported.
func (l *Locker) warnHook(kind string, err error) {
	now := l.clock.Mono()
	l.warnMu.Lock()
	last, seen := l.lastWarn[kind]
	if seen && now-last < hookWarnInterval {
		l.warnMu.Unlock()
		return
	}
	l.lastWarn[kind] = now
	l.warnMu.Unlock()
	l.log.Warn("recordlock: release hook failed; the lease bounds the hold anyway", "kind", kind, "err", err)
}
