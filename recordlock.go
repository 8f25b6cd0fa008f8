package recordlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/recordlock/recordlock/internal/locktable"
)

// Locker issues record locks on the keys of one RocksDB database. Every Locker made for the same
// database in this process shares one key-lock table, so they exclude each other. A Locker is
// safe for concurrent use.
type Locker struct {
	ten        locktable.Tenant // all the key-lock table sees of it
	tab        *locktable.Table
	clock      Clock
	log        *slog.Logger
	path       string    // the database's canonical path, its key in the registry
	state      *database // what the process keeps of the database
	db         *grocksdb.DB
	opts       resolvedCache
	failpoints failpoints
	cfs        columnFamilies

	closeOnce sync.Once
	// closing is cancelled when Close begins, to call off the coordinator requests in flight.
	closing context.Context
	cancel  context.CancelFunc
	commits commitQueue // the writes of Txns committing at the same time, made together
}

// New returns a Locker for db. It returns an error matching ErrInvalidOptions when db is nil or
// WithClock was given nil, and an *OptionError for WithMaxLocks below 1; nothing is registered
// then.
func New(db *grocksdb.DB, opts ...Option) (*Locker, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: db must not be nil", ErrInvalidOptions)
	}
	cfg := config{clock: SystemClock()}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if cfg.clock == nil {
		return nil, fmt.Errorf("%w: WithClock(nil)", ErrInvalidOptions)
	}
	if n := cfg.maxLocks; n != nil && *n < 1 {
		return nil, &OptionError{Field: "MaxLocks", Value: *n, Reason: "must be at least 1", locker: true}
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	path := canonicalPath(db.Name())
	tab, state := acquireTable(path)
	if cfg.coord != nil {
		state.coord.set(cfg.coord)
	}
	closing, cancel := context.WithCancel(context.Background())
	l := &Locker{
		tab:        tab,
		clock:      cfg.clock,
		log:        cfg.log,
		path:       path,
		state:      state,
		db:         db,
		cfs:        columnFamilies{names: &state.families},
		failpoints: cfg.failpoints,
		closing:    closing,
		cancel:     cancel,
	}
	tab.Open(&l.ten, cfg.clock, cfg.log)
	if cfg.maxLocks != nil {
		l.ten.SetBound(*cfg.maxLocks)
	}
	if cfg.failpoints.noRangeConflicts {
		tab.DisableRangeConflicts()
	}
	l.ten.SetOnWaitedOn(l.commits.hurry)
	return l, nil
}

// SetCoordinator makes c the coordinator of this Locker's database, for every Locker of it.
// A nil c is the same as RemoveCoordinator(false).
func (l *Locker) SetCoordinator(c Coordinator) {
	if c == nil {
		l.state.coord.remove(false)
		return
	}
	l.state.coord.set(c)
}

// RemoveCoordinator removes the database's coordinator. With standalone=false, locks of default
// scope then fail closed with ErrClusterUnavailable (a transport that went away is no proof that
// the database became standalone); with standalone=true they run as node locks again.
func (l *Locker) RemoveCoordinator(standalone bool) { l.state.coord.remove(standalone) }

// Timestamp mints a timestamp: wall-anchored Unix nanoseconds, strictly increasing across every
// Locker and goroutine of this database.
func (l *Locker) Timestamp() Timestamp {
	return Timestamp(l.state.stamps.Mint(l.clock.Now().UnixNano()))
}

// Lock waits until key is free and locks it. A zero opts.Timeout means DefaultTimeout, except
// that with a ctx that has a deadline the ctx alone bounds the wait; a non-zero Timeout and a ctx
// deadline both apply. With cluster scope the coordinator's round gets what is left of the
// Timeout, or with a zero Timeout and a ctx deadline, of the time until that deadline when Lock
// started. The caller may reuse key once Lock returns.
//
// On failure Lock returns a nil handle and leaves nothing locked or queued. The error is:
//   - an *OptionError matching ErrInvalidOptions for invalid opts, an error matching
//     ErrInvalidOptions for a nil ctx, one matching ErrInvalidKey for a nil, empty or too long key
//     (its message says which), and ErrClosed once the Locker is closed, before anything is
//     locked;
//   - ErrTimeout once opts.Timeout has passed on the Locker's clock, or when the coordinator did
//     not grant a round within it;
//   - an error matching ctx's error once ctx is done (at once if it already is);
//   - ErrClusterUnavailable when cluster scope cannot be granted: ScopeCluster with no
//     coordinator, a coordinator removed without declaring the database standalone, a
//     coordinator that failed (its error is wrapped as well), or a round that lapsed or was
//     revoked before it was joined;
//   - ErrClosed when the Locker is closed while Lock waits;
//   - an error matching ErrTooManyLocks, at once, when the Locker already keeps as many locks
//     and queued requests as WithMaxLocks allows.
func (l *Locker) Lock(ctx context.Context, key []byte, opts Options) (*Handle, error) {
	return l.lock(ctx, lockRequest{key: key, wait: true}, &opts)
}

// LockCF is Lock of key in column family cf: the same key bytes in two column families are two
// records, locked independently. A nil cf is the default column family, as Lock uses. Besides
// the errors of Lock, it fails before anything is locked with an error matching
// ErrInvalidOptions when cf cannot be a family of the Locker's database: its name is not one of
// the database's families, or its ID cannot be that family's (see Txn for what can be told).
func (l *Locker) LockCF(ctx context.Context, cf *grocksdb.ColumnFamilyHandle, key []byte, opts Options) (*Handle, error) {
	id, err := l.columnFamily(cf)
	if err != nil {
		return nil, err
	}
	return l.lock(ctx, lockRequest{cf: id, key: key, wait: true}, &opts)
}

// TryLock locks key if Lock would not have to wait for it (the key is free or, for a shared
// lock, held shared with nobody queued) and fails with ErrLocked at once if it would. With cluster
// scope the coordinator's round is bounded by opts.Timeout; a round not granted within it (the key
// is held on another node) fails with an error matching both ErrLocked and ErrTimeout. It fails
// as Lock does with an *OptionError matching ErrInvalidOptions, ErrInvalidKey, ErrClosed,
// ErrClusterUnavailable or ErrTooManyLocks. On failure it returns a nil handle and nothing stays
// locked.
func (l *Locker) TryLock(key []byte, opts Options) (*Handle, error) {
	return l.lock(context.Background(), lockRequest{key: key}, &opts)
}

// TryLockCF is TryLock of key in column family cf (nil: the default column family). A cf that
// cannot be a family of the Locker's database fails as in LockCF, with an error matching
// ErrInvalidOptions.
func (l *Locker) TryLockCF(cf *grocksdb.ColumnFamilyHandle, key []byte, opts Options) (*Handle, error) {
	id, err := l.columnFamily(cf)
	if err != nil {
		return nil, err
	}
	return l.lock(context.Background(), lockRequest{cf: id, key: key}, &opts)
}

// lockRequest is what identifies one lock call apart from its Options.
type lockRequest struct {
	cf    uint32 // column family ID
	key   []byte // the key, or a range's Start
	wait  bool   // Lock waits for a busy key; TryLock does not
	rng   *Range // a range lock of rng, checked by Range.check, whose Start is key; nil for a key
	owner *Txn   // the Txn that locks, nil outside one
	// timeout, when positive, bounds the wait instead of Options.Timeout: what is left of
	// LockAll's budget, which is not a valid Options.Timeout once below MinTimeout.
	timeout time.Duration
	// holding: the owner holds keys its list does not show yet, those LockAll took so far.
	holding bool
	// room, under WithMaxLocks, counts the rooms LockAll reserved for its keys not yet taken:
	// the request takes one of them instead of reserving its own. nil outside LockAll.
	room *int
}

// check validates a lock request. A range's bounds are checked before (Range.check): its Start
// may be empty.
func (l *Locker) check(req lockRequest, opts Options) (Resolved, error) {
	r, err := l.opts.resolve(opts)
	if err != nil {
		return r, err
	}
	if req.rng == nil && (len(req.key) == 0 || len(req.key) > maxKeyLen) {
		return r, invalidKey(req.key)
	}
	if l.ten.Closed() {
		return r, ErrClosed
	}
	return r, nil
}

func (l *Locker) lock(ctx context.Context, req lockRequest, opts *Options) (*Handle, error) {
	key := req.key
	// The usual case reads the cached resolution in place: copying the Resolved out of check
	// through two calls cost about a tenth of an uncontended Lock.
	e := l.opts.lookup(opts)
	if e == nil || len(key) == 0 || len(key) > maxKeyLen || l.ten.Closed() {
		res, err := l.check(req, *opts)
		if err != nil {
			return nil, err
		}
		fresh := newResolvedEntry(*opts, res)
		e = &fresh
	}
	r := &e.r
	if ctx == nil {
		return nil, errNilContext
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	wait := r.Timeout // how long the local wait for the key may last on l's clock
	// With no Timeout a ctx deadline alone bounds the wait. The table reads it only if the key
	// is busy, so that an uncontended Lock makes no call on ctx for it.
	ctxBounds := false
	if req.timeout > 0 {
		res := *r
		res.Timeout = req.timeout
		r, wait = &res, req.timeout
	} else {
		ctxBounds = opts.Timeout == 0
	}
	var coord Coordinator
	if r.Scope != ScopeNode { // a node lock never consults the coordinator
		c, err := l.state.coord.choose(r)
		if err != nil {
			return nil, err
		}
		coord = c
	}
	if coord != nil && ctxBounds {
		// The cluster round needs its bound on l's clock: with a ctx deadline, the time left until
		// it. The local wait still leaves that deadline to ctx (ctxBounds).
		mono := l.clock.Mono()
		end, err := locktable.ClockDeadline(ctx, mono, r.Timeout, true)
		if err != nil {
			return nil, err
		}
		res := *r
		res.Timeout = end - mono
		r = &res
	}
	ask := e.ask
	if l.ten.Bounded() { // WithMaxLocks: the request takes its room first (docs/DESIGN.md §18)
		if req.room != nil {
			*req.room-- // one of the rooms its LockAll reserved
		} else if !l.ten.Reserve(1) {
			return nil, l.tooManyLocks()
		}
		ask |= locktable.AskCounted // the claim gives its room back as it leaves the table
	}
	h := l.newHandle(&req, ask)
	start, err := h.claim.Acquire(ctx, r.Lease, wait, req.wait, ctxBounds)
	if err != nil {
		return nil, l.fromTable(h, err)
	}
	if coord != nil {
		if err := l.joinCluster(ctx, h, coord, *r, start); err != nil {
			if !req.wait && errors.Is(err, ErrTimeout) {
				// The key is busy elsewhere in the cluster: for TryLock that is ErrLocked, and the
				// error still says the round was not granted within Timeout.
				return nil, fmt.Errorf("%w: %w", ErrLocked, err)
			}
			return nil, err
		}
	}
	return h, nil
}

// newHandle returns a handle for the request, asking for ask (Hold, Shared), and marked as asked
// by a Txn that holds other keys when it does (locktable.AskOwnerHolds). The request is passed
// by pointer, so that the hot path does not copy it.
func (l *Locker) newHandle(req *lockRequest, ask locktable.Ask) *Handle {
	var owner locktable.Owner
	if req.owner != nil {
		owner = req.owner
		if req.holding || req.owner.holdsAny() {
			ask |= locktable.AskOwnerHolds
		}
	}
	h := &Handle{}
	if req.rng != nil {
		l.ten.PrepareRange(&h.claim, owner, req.cf, req.key, req.rng.End, ask)
	} else {
		l.ten.Prepare(&h.claim, owner, req.cf, req.key, ask)
	}
	return h
}

// Close releases every handle this Locker issued (their release hooks fire), fails its waiting
// Lock calls with ErrClosed, calls off its coordinator requests in flight, and makes later calls
// return ErrClosed. Once it returns no fenced write of its handles is in flight, so the database
// may be closed. Other Lockers of the same database keep working. Close is idempotent, a
// concurrent Close returns once the first has finished, and it always returns nil. A release
// hook must not call Close of the Locker that fires it.
func (l *Locker) Close() error {
	l.closeOnce.Do(l.close)
	return nil
}

func (l *Locker) close() {
	l.ten.MarkClosed()
	l.cancel()
	l.ten.Shutdown()
	releaseTable(l.path)
}
