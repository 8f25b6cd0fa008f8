package locktable

import (
	"fmt"
	"time"
)

// Release hooks run outside every table lock; their failures are contained and reported at a
// limited rate (docs/DESIGN.md §10).

// hookWarnInterval is how often one kind of release-hook failure is logged per Locker.
const hookWarnInterval = 60 * time.Second

// RunHook calls a release hook; a panic or error never escapes, it is logged at a limited rate.
func (c *Tenant) RunHook(fn func() error) {
	defer func() {
		if p := recover(); p != nil {
			c.tab.hookFailures.Add(1)
			c.warnHook("panic", fmt.Errorf("%v", p))
		}
	}()
	if err := fn(); err != nil {
		c.tab.hookFailures.Add(1)
		c.warnHook("error", err)
	}
}

// warnHook logs one line per kind of failure per hookWarnInterval of this Locker's clock. It is
// rate-limited rather than latched so that a fault that persists keeps being reported.
func (c *Tenant) warnHook(kind string, err error) {
	now := c.clock.Mono()
	c.warnMu.Lock()
	last, seen := c.lastWarn[kind]
	if seen && now-last < hookWarnInterval {
		c.warnMu.Unlock()
		return
	}
	c.lastWarn[kind] = now
	c.warnMu.Unlock()
	c.log.Warn("recordlock: release hook failed; the lease bounds the claim anyway", "kind", kind, "err", err)
}
