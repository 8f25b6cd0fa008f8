package recordlock

import (
	"fmt"
	"time"
)

// Release hooks run outside every table lock; their failures are contained and reported at a
// limited rate (docs/DESIGN.md §10).

// hookWarnInterval is how often one kind of release-hook failure is logged per Locker.
const hookWarnInterval = 60 * time.Second

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
