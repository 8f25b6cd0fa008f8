package locktable

import (
	"context"
	"log/slog"
	"time"
)

// Debug records of a lease that lapsed with its key still held, an event an operator looks for
// under a stall (the API writes those of deadlocks). They are built only when the tenant's logger
// is enabled at debug level, and written once the shard mutex is released.

// debugEnabled reports whether c's logger takes debug records now.
func (c *Tenant) debugEnabled() bool { return c.log.Enabled(context.Background(), slog.LevelDebug) }

// noteLapse queues a debug record for h, whose lease lapsed while it held its key. Called with the
// shard mutex held.
func (sh *shard) noteLapse(h *Claim) {
	c := h.ten
	if !c.debugEnabled() {
		return
	}
	key, cf, waiters := string(h.key()), h.cf, 0
	if h.e != nil {
		waiters = h.e.queued()
	}
	age := time.Duration(c.clock.Now().UnixNano() - int64(h.acquiredAt))
	sh.deferred = append(sh.deferred, deferredCall{h: h, note: func() {
		c.log.Debug("recordlock: lease lapsed with its key held", "db", sh.tab.path, "key", key,
			"cf", cf, "holder_age", age, "waiters", waiters)
	}})
}
