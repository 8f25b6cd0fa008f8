package recordlock

import "log/slog"

// Option configures New.
type Option interface{ apply(*config) }

type config struct {
	clock      Clock
	log        *slog.Logger
	coord      Coordinator
	maxLocks   *int // WithMaxLocks's n; nil without the option
	failpoints failpoints
}

type clockOption struct{ c Clock }

func (o clockOption) apply(c *config) { c.clock = o.c }

// WithClock makes the Locker run its leases, timeouts and timestamps on c instead of SystemClock.
func WithClock(c Clock) Option { return clockOption{c} }

type loggerOption struct{ l *slog.Logger }

func (o loggerOption) apply(c *config) { c.log = o.l }

// WithLogger sets the Locker's logger. Release-hook failures and key-table faults are reported
// at warn level; at debug level, when the logger is enabled for it, a lease that lapsed while its
// key was still held and a deadlock found each get a record with the key, the holder's age and
// the number of waiters. The default, and what nil means, is slog.Default().
func WithLogger(l *slog.Logger) Option { return loggerOption{l} }

type coordinatorOption struct{ c Coordinator }

func (o coordinatorOption) apply(c *config) { c.coord = o.c }

// WithCoordinator sets the database's coordinator, as SetCoordinator does.
func WithCoordinator(c Coordinator) Option { return coordinatorOption{c} }

type maxLocksOption struct{ n int }

func (o maxLocksOption) apply(c *config) { c.maxLocks = &o.n }

// WithMaxLocks bounds what the Locker keeps in its database's key-lock table: the locks it holds
// and the requests it has queued, together, at most n. A shared lock counts once per holder, a
// range lock once; a Txn's lock of a record it already holds (re-entrant, or inside one of its
// range locks) and an upgrade (to exclusive, or to Hold) take no room. A lock call that would
// exceed the bound, or a LockAll whose keys the Txn does not hold do not all fit, fails at once
// with an error matching ErrTooManyLocks that names n; it waits for nothing and changes nothing. A
// lock released, lapsed or revoked, or a request that gave up, makes room at once. The bound costs
// each Lock and Release one atomic add on a counter of the Locker's own; other Lockers of the
// database have bounds of their own. Without the option there is no bound. New rejects an n below
// 1 with an *OptionError.
func WithMaxLocks(n int) Option { return maxLocksOption{n} }

// failpoints let white-box tests stop the code at points no public call can reach, or turn off a
// check to show that a test catches its absence. They are set through an unexported Option, so
// production Lockers have none.
type failpoints struct {
	inFence             func()      // Txn.Commit calls it inside the fences, just before the batch is written
	beforeHoldExtension func()      // Txn.LockAll with Hold calls it once every key is live, before its Hold extensions
	groupWrite          func(n int) // Txn.Commit calls it before each RocksDB write, with how many Txns it writes
	// noRangeConflicts makes New turn off the range conflict check of the database's key-lock
	// table (locktable.Table.DisableRangeConflicts), for every Locker of the database until its
	// table is dropped, so that a test can show it catches the phantoms that follow.
	noRangeConflicts bool
}

type failpointsOption struct{ f failpoints }

func (o failpointsOption) apply(c *config) { c.failpoints = o.f }
