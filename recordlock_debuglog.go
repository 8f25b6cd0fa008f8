package recordlock

import (
	"context"
	"log/slog"
	"time"
)

// Debug records of the events an operator looks for under a stall: a lease that lapsed with its
// key still held, and a deadlock. They are built only when the Locker's logger is enabled at debug
// level, and written once the shard mutex is released.

// debugEnabled reports whether c's logger takes debug records now.
func (c *tenant) debugEnabled() bool { return c.log.Enabled(context.Background(), slog.LevelDebug) }

// noteLapse queues a debug record for h, whose lease lapsed while it held its key. Called with the
// shard mutex held.
func (sh *shard) noteLapse(h *Handle) {
	c := h.tenant()
	if !c.debugEnabled() {
		return
	}
	key, cf, waiters := string(h.key()), h.cf, 0
	if h.e != nil {
		waiters = h.e.queued()
	}
	age := time.Duration(c.clock.Now().UnixNano() - int64(h.acquiredAt))
	sh.hooks = append(sh.hooks, pendingHook{h: h, note: func() {
		c.log.Debug("recordlock: lease lapsed with its key held", "db", sh.tab.path, "key", key,
			"cf", cf, "holder_age", age, "waiters", waiters)
	}})
}

// logDeadlock writes a debug record of a deadlock found for h's request, with waiters the number of
// Lock calls queued for h's key.
func (c *tenant) logDeadlock(h *Handle, err *DeadlockError, waiters int, holderAge time.Duration) {
	if !c.debugEnabled() {
		return
	}
	c.log.Debug("recordlock: deadlock", "db", c.tab.path, "key", string(h.key()), "cf", h.cf,
		"holder_age", holderAge, "waiters", waiters, "cycle", err.Error())
}
