package locktable

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Tenant is what the table knows of one user of it (a Locker): its clock and clock slot, whether
// it is closed, its fences on released claims, and where its debug records and release-hook
// failures go. Every claim belongs to one tenant.
type Tenant struct {
	tab     *Table
	clock   Clock
	clockID int // the slot of clock among the table's clocks
	log     *slog.Logger
	closed  atomic.Bool
	strays  strayFences
	// bound caps the tenant's claims in the table (bound.go); nil for none. Set before the
	// tenant's first request, never changed.
	bound *bound
	// onWaitedOn, when set, is told the owner of a claim of the tenant when a request queues for
	// its key (SetOnWaitedOn).
	onWaitedOn func(Owner)

	warnMu   sync.Mutex
	lastWarn map[string]time.Duration // Mono of the last warning per kind of hook failure
}

// Open makes t, which must be zero, a tenant of the table with clock c, logging to log.
func (tab *Table) Open(t *Tenant, c Clock, log *slog.Logger) {
	t.tab, t.clock, t.log = tab, c, log
	t.clockID = tab.openClock(c)
	t.lastWarn = map[string]time.Duration{}
}

// SetOnWaitedOn makes f the function told, outside every table mutex, the owner of a claim of the
// tenant each time a request queues for the claim's key: what that owner does before it lets go
// now holds up another (the API's commit queue, docs/DESIGN.md §5.4). Set it before the tenant's
// first request; f must not block.
func (t *Tenant) SetOnWaitedOn(f func(Owner)) { t.onWaitedOn = f }

// Closed reports whether the tenant is closed.
func (t *Tenant) Closed() bool { return t.closed.Load() }

// MarkClosed makes every later request of the tenant fail with ErrClosed; Shutdown then takes the
// tenant out of the table.
func (t *Tenant) MarkClosed() { t.closed.Store(true) }

// Shutdown takes every trace of the tenant, marked closed, out of the table: its waiting requests
// fail with ErrClosed, its claims are released (their release hooks fire), and it waits for its
// fences on released holds to end. Its clock slot is given back last.
func (t *Tenant) Shutdown() {
	for _, h := range t.tab.evict(t) {
		h.Release()
	}
	t.strays.closeAndWait()
	t.tab.closeClock(t.clockID)
}

// Clock is the tenant's clock.
func (t *Tenant) Clock() Clock { return t.clock }

// EnterStray registers a fence of the tenant that holds no key, which Shutdown waits for, as it
// waits for fences on released holds; false once the tenant is shut down, and then the fence
// must not run. LeaveStray ends it.
func (t *Tenant) EnterStray() bool { return t.strays.enter() }

// LeaveStray ends a fence EnterStray registered.
func (t *Tenant) LeaveStray() { t.strays.leave() }
