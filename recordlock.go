package recordlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linxGnu/grocksdb"
)

// hookWarnInterval is how often one kind of release-hook failure is logged per Locker.
const hookWarnInterval = 60 * time.Second

// Locker issues record locks on the keys of one RocksDB database. Every Locker made for the same
// database in this process shares one key-lock table, so they exclude each other. A Locker is
// safe for concurrent use.
type Locker struct {
	db      *grocksdb.DB
	tab     *table
	clock   Clock
	clockID int
	log     *slog.Logger
	closed  atomic.Bool
	opts    resolvedCache

	warnMu   sync.Mutex
	lastWarn map[string]time.Duration // Mono of the last warning per kind of hook failure
}

// Option configures New.
type Option interface{ apply(*config) }

type config struct {
	clock Clock
	log   *slog.Logger
	coord Coordinator
}

type clockOption struct{ c Clock }

func (o clockOption) apply(c *config) { c.clock = o.c }

// WithClock makes the Locker run its leases, timeouts and timestamps on c instead of SystemClock.
func WithClock(c Clock) Option { return clockOption{c} }

type loggerOption struct{ l *slog.Logger }

func (o loggerOption) apply(c *config) { c.log = o.l }

// WithLogger sets where release-hook failures and key-table faults are reported (at warn level).
// The default, and what nil means, is slog.Default().
func WithLogger(l *slog.Logger) Option { return loggerOption{l} }

type coordinatorOption struct{ c Coordinator }

func (o coordinatorOption) apply(c *config) { c.coord = o.c }

// WithCoordinator sets the database's coordinator, as SetCoordinator does.
func WithCoordinator(c Coordinator) Option { return coordinatorOption{c} }

// New returns a Locker for db. It returns an error matching ErrInvalidOptions when db is nil or
// WithClock was given nil; nothing is registered then.
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
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	tab := acquireTable(canonicalPath(db.Name()))
	if cfg.coord != nil {
		tab.coord.set(cfg.coord)
	}
	return &Locker{
		db:       db,
		tab:      tab,
		clock:    cfg.clock,
		clockID:  tab.clockID(cfg.clock),
		log:      cfg.log,
		lastWarn: map[string]time.Duration{},
	}, nil
}

// SetCoordinator makes c the coordinator of this Locker's database, for every Locker of it.
// A nil c is the same as RemoveCoordinator(false).
func (l *Locker) SetCoordinator(c Coordinator) {
	if c == nil {
		l.tab.coord.remove(false)
		return
	}
	l.tab.coord.set(c)
}

// RemoveCoordinator removes the database's coordinator. With standalone=false, locks of default
// scope then fail closed with ErrClusterUnavailable (a transport that went away is no proof that
// the database became standalone); with standalone=true they run as node locks again.
func (l *Locker) RemoveCoordinator(standalone bool) { l.tab.coord.remove(standalone) }

// Timestamp mints a timestamp: wall-anchored Unix nanoseconds, strictly increasing across every
// Locker and goroutine of this database.
func (l *Locker) Timestamp() Timestamp { return l.tab.stamps.mint(l.clock.Now().UnixNano()) }

// Lock waits until key is free and locks it. It fails with ErrTimeout once opts.Timeout has
// passed, and with an error matching ctx's error once ctx is done (at once if it already is);
// invalid options or key fail before anything is locked. On failure nothing stays locked or
// queued. The caller may reuse key once Lock returns.
func (l *Locker) Lock(ctx context.Context, key []byte, opts Options) (*Handle, error) {
	return l.lock(ctx, lockRequest{key: key, wait: true}, opts)
}

// LockCF is Lock of key in column family cf: the same key bytes in two column families are two
// records, locked independently. A nil cf is the default column family, as Lock uses.
func (l *Locker) LockCF(ctx context.Context, cf *grocksdb.ColumnFamilyHandle, key []byte, opts Options) (*Handle, error) {
	return l.lock(ctx, lockRequest{cf: columnFamilyID(cf), key: key, wait: true}, opts)
}

// TryLock locks key if it is free and fails with ErrLocked at once if it is not. With cluster
// scope the coordinator's round is bounded by opts.Timeout.
func (l *Locker) TryLock(key []byte, opts Options) (*Handle, error) {
	return l.lock(context.Background(), lockRequest{key: key}, opts)
}

// TryLockCF is TryLock of key in column family cf (nil: the default column family).
func (l *Locker) TryLockCF(cf *grocksdb.ColumnFamilyHandle, key []byte, opts Options) (*Handle, error) {
	return l.lock(context.Background(), lockRequest{cf: columnFamilyID(cf), key: key}, opts)
}

// lockRequest is what identifies one lock call apart from its Options.
type lockRequest struct {
	cf    uint32 // column family ID
	key   []byte
	wait  bool // Lock waits for a busy key; TryLock does not
	owner *Txn // the Txn that locks, nil outside one
	// timeout, when positive, bounds the wait instead of Options.Timeout: what is left of
	// LockAll's budget, which is not a valid Options.Timeout once below MinTimeout.
	timeout time.Duration
}

// columnFamilyID is cf's ID, 0 (the default column family) for nil.
func columnFamilyID(cf *grocksdb.ColumnFamilyHandle) uint32 {
	if cf == nil {
		return 0
	}
	return cf.ID()
}

// check validates a lock request.
func (l *Locker) check(key []byte, opts Options) (Resolved, error) {
	r, err := l.opts.resolve(opts)
	if err != nil {
		return r, err
	}
	if len(key) == 0 {
		return r, ErrInvalidKey
	}
	if l.closed.Load() {
		return r, ErrClosed
	}
	return r, nil
}

// resolvedCache remembers Options.Resolve's result for the first few distinct valid Options a
// Locker is given, so that a Lock with the same Options does not validate them again: Resolve
// depends on nothing but its input. Entries are immutable and never replaced; Options beyond
// the first few are resolved on every call.
type resolvedCache struct {
	slots [4]atomic.Pointer[resolvedEntry]
}

type resolvedEntry struct {
	opts Options
	r    Resolved
}

// lookup returns the cached resolution of o, or nil. The result must not be modified.
func (c *resolvedCache) lookup(o Options) *Resolved {
	for i := range c.slots {
		e := c.slots[i].Load()
		if e == nil {
			break
		}
		if e.opts == o {
			return &e.r
		}
	}
	return nil
}

func (c *resolvedCache) resolve(o Options) (Resolved, error) {
	if r := c.lookup(o); r != nil {
		return *r, nil
	}
	r, err := o.Resolve()
	if err != nil {
		return r, err
	}
	var fresh *resolvedEntry
	for i := range c.slots {
		e := c.slots[i].Load()
		if e == nil {
			if fresh == nil {
				fresh = &resolvedEntry{opts: o, r: r}
			}
			if c.slots[i].CompareAndSwap(nil, fresh) {
				break
			}
			e = c.slots[i].Load() // another Lock filled the slot first
		}
		if e.opts == o {
			break
		}
	}
	return r, nil
}

func (l *Locker) lock(ctx context.Context, req lockRequest, opts Options) (*Handle, error) {
	key, wait := req.key, req.wait
	// The usual case reads the cached resolution in place: copying the Resolved out of check
	// through two calls cost about a tenth of an uncontended Lock.
	r := l.opts.lookup(opts)
	if r == nil || len(key) == 0 || l.closed.Load() {
		res, err := l.check(key, opts)
		if err != nil {
			return nil, err
		}
		r = &res
	}
	if req.timeout > 0 {
		res := *r
		res.Timeout = req.timeout
		r = &res
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var coord Coordinator
	if r.Scope != ScopeNode { // a node lock never consults the coordinator
		c, err := l.tab.coord.resolve(*r)
		if err != nil {
			return nil, err
		}
		coord = c
	}
	h := l.newHandle(req, r.Hold)
	start, err := l.acquireLocal(ctx, h, r.Lease, r.Timeout, wait)
	if err != nil {
		return nil, err
	}
	if coord != nil {
		if err := l.joinCluster(ctx, h, coord, *r, start); err != nil {
			return nil, err
		}
	}
	return h, nil
}

func (l *Locker) newHandle(req lockRequest, hold bool) *Handle {
	key := req.key
	h := &Handle{l: l, heapIdx: -1, cf: req.cf, owner: req.owner}
	if len(key) <= len(h.keyBuf) {
		h.key = h.keyBuf[:len(key):len(key)]
		copy(h.key, key)
	} else {
		h.key = bytes.Clone(key)
	}
	h.hash = l.tab.hash(h.cf, h.key)
	if hold {
		h.state.Store(flagHold)
	}
	return h
}

// acquireLocal takes h's key in the table, waiting if allowed. It returns the Mono reading at
// which the attempt started, from which the remaining wait is measured.
func (l *Locker) acquireLocal(ctx context.Context, h *Handle, lease, timeout time.Duration, wait bool) (time.Duration, error) {
	sh := l.tab.shard(h.hash)
	wall, mono := readClock(l.clock)
	sh.mu.Lock()
	if l.closed.Load() {
		sh.mu.Unlock()
		return 0, ErrClosed
	}
	e := sh.lookup(h)
	if e != nil {
		sh.settleLapsed(e, l, mono)
		e = sh.lookup(h) // settling may have emptied and removed the entry
	}
	switch {
	case e == nil:
		e = sh.newEntry(h.hash)
		sh.grant(e, h, wall, mono, lease)
		sh.index.insert(e)
	case e.holder == nil && l.mayBarge(e.head, mono):
		sh.grant(e, h, wall, mono, lease)
	case !wait:
		sh.unlockAndRunHooks()
		return 0, ErrLocked
	default:
		return mono, l.wait(ctx, sh, e, h, lease, mono+timeout, mono)
	}
	sh.unlockAndRunHooks()
	return mono, nil
}

// mayBarge reports whether a newcomer may take a free key ahead of the woken oldest waiter: only
// while that waiter has waited less than bargeWindow.
func (l *Locker) mayBarge(oldest *waiter, mono time.Duration) bool {
	if oldest == nil {
		return true
	}
	now := mono
	if oldest.h.l.clockID != l.clockID {
		now = oldest.h.l.clock.Mono()
	}
	return now-oldest.since < bargeWindow
}

// wait queues h for e's key and blocks until it is granted, the timeout passes, ctx is done or
// the Locker closes. It is called with sh.mu held and returns with it released.
func (l *Locker) wait(ctx context.Context, sh *shard, e *keyEntry, h *Handle, lease, deadline, mono time.Duration) error {
	w := &waiter{h: h, since: mono, lease: lease, wake: make(chan struct{}, 1)}
	h.w, h.e = w, e
	sh.enqueue(e, w)
	h.deadline.Store(int64(deadline)) // the wait's timeout until the key is granted
	sh.sched(l).push(h, mono)
	sh.unlockAndRunHooks()
	for {
		select {
		case <-w.wake:
		case <-ctx.Done():
		}
		sh.mu.Lock()
		switch w.state {
		case waitGranted:
			sh.unlockAndRunHooks()
			return l.closedAfterGrant(h)
		case waitTimedOut:
			sh.unlockAndRunHooks()
			return ErrTimeout
		case waitClosed:
			sh.unlockAndRunHooks()
			return ErrClosed
		case waitWoken:
			if e.holder == nil {
				sh.dequeue(e, w)
				sh.unschedule(h)
				h.w = nil
				wall, now := readClock(l.clock)
				sh.grant(e, h, wall, now, lease)
				sh.unlockAndRunHooks()
				return l.closedAfterGrant(h)
			}
			// A newcomer took the key first; stay at the head of the queue.
			w.state = waitQueued
			e.wakePending = false
		}
		if err := ctx.Err(); err != nil {
			sh.abandon(w, waitCancelled)
			sh.unlockAndRunHooks()
			return err
		}
		sh.mu.Unlock()
	}
}

// closedAfterGrant covers a grant that raced with Close: the key goes back and Lock fails.
func (l *Locker) closedAfterGrant(h *Handle) error {
	if l.closed.Load() {
		h.Release()
		return ErrClosed
	}
	return nil
}

// joinCluster obtains a round for h's key from coord with what is left of the wait, and joins
// it. On any failure the local key goes back.
func (l *Locker) joinCluster(ctx context.Context, h *Handle, coord Coordinator, r Resolved, start time.Duration) error {
	remaining := start + r.Timeout - l.clock.Mono()
	if remaining <= 0 {
		h.Release()
		return ErrTimeout
	}
	// The local key must outlast the wait: if its lease lapsed while Acquire ran, another Lock of
	// this node could take the key and ask the cluster for it at the same time. No round granted
	// within the wait ends after start+Timeout+Lease; joining it sets the real deadline.
	if !h.holdThrough(start + r.Timeout + r.Lease) {
		return ErrTimeout
	}
	cctx, cancel := context.WithCancelCause(ctx)
	budget := l.clock.AfterFunc(remaining, func() { cancel(ErrTimeout) })
	round, err := coord.Acquire(cctx, h.key, r.Lease, h.RevokeLease)
	budget.Stop()
	outOfTime := context.Cause(cctx) == ErrTimeout
	cancel(nil)
	if err != nil {
		h.Release()
		switch {
		case errors.Is(err, ErrTimeout), errors.Is(err, ErrClusterUnavailable):
			return err
		case ctx.Err() != nil:
			return fmt.Errorf("recordlock: cluster round: %w", ctx.Err())
		case outOfTime && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
			// The coordinator gave up because the wait ran out: that is the caller's Timeout.
			return fmt.Errorf("%w: the cluster did not grant a round in time", ErrTimeout)
		}
		return fmt.Errorf("%w: %w", ErrClusterUnavailable, err)
	}
	if !h.join(round, r.Lease) {
		h.Release()
		if round.Release != nil {
			l.runHook(round.Release)
		}
		return fmt.Errorf("%w: the round's lease lapsed before it was joined", ErrClusterUnavailable)
	}
	return nil
}

// Close releases every handle this Locker issued (their release hooks fire), fails its waiting
// Lock calls with ErrClosed, and makes later calls return ErrClosed. Other Lockers of the same
// database keep working. Close is idempotent and always returns nil.
func (l *Locker) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return nil
	}
	var held []*Handle
	for i := range l.tab.shards {
		sh := &l.tab.shards[i]
		sh.mu.Lock()
		// Collect first: abandoning a waiter can hand its key on or take it out of the table.
		var entries []*keyEntry
		sh.index.all(func(e *keyEntry) { entries = append(entries, e) })
		for _, e := range entries {
			if e.holder != nil && e.holder.l == l {
				held = append(held, e.holder)
			}
			var mine []*waiter
			for w := e.head; w != nil; w = w.next {
				if w.h.l == l {
					mine = append(mine, w)
				}
			}
			for _, w := range mine {
				if w.h.w == w { // still queued; a granted one fails in closedAfterGrant
					sh.abandon(w, waitClosed)
				}
			}
		}
		sh.unlockAndRunHooks()
	}
	for _, h := range held {
		h.Release()
	}
	l.tab.dropClock(l.clockID)
	releaseTable(l.tab)
	return nil
}

// runHook calls a release hook; a panic or error never escapes, it is logged at a limited rate.
func (l *Locker) runHook(fn func() error) {
	defer func() {
		if p := recover(); p != nil {
			l.warnHook("panic", fmt.Errorf("%v", p))
		}
	}()
	if err := fn(); err != nil {
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
