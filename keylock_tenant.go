package recordlock

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// tenant is what the key-lock table sees of a Locker that uses it: its table, clock and clock
// slot, whether it is closed, and where its debug records and release-hook failures go. The
// Locker embeds it, and table code reaches a handle's Locker only through Handle.tenant, so the
// table depends on nothing else of the Locker (docs/DESIGN.md §2.6).
type tenant struct {
	tab     *table
	clock   Clock
	clockID int // the slot of clock among the table's clocks
	log     *slog.Logger
	closed  atomic.Bool

	warnMu   sync.Mutex
	lastWarn map[string]time.Duration // Mono of the last warning per kind of hook failure
}
