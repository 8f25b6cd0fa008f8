package recordlock

import (
	"context"
	"log/slog"
	"time"
)

// The debug record of a deadlock, an event an operator looks for under a stall (the table writes
// those of leases that lapsed with their key held). It is built only when the Locker's logger is
// enabled at debug level.

// logDeadlock writes a debug record of a deadlock found for h's request, with waiters the number of
// Lock calls queued for h's key and holderAge how long its holder had held it.
func (l *Locker) logDeadlock(h *Handle, err *DeadlockError, waiters int, holderAge time.Duration) {
	if !l.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	l.log.Debug("recordlock: deadlock", "db", l.path, "key", string(h.key()), "cf", h.hold.CF(),
		"holder_age", holderAge, "waiters", waiters, "cycle", err.Error())
}
