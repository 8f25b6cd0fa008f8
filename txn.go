package recordlock

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock/internal/locktable"
)

// Txn is a read-modify-write transaction over the Locker's database: it locks records, reads
// them, stages writes, and commits the writes as one RocksDB WriteBatch that lands only while
// the lease of every lock protecting them is live.
//
// A record is a key in a column family; the plain methods use the default column family, the
// ones ending in CF take a column family handle of the Locker's database. A handle of another
// database would write into this database's family of the same ID, so every call that takes one
// refuses it, with an error matching ErrInvalidOptions and before anything is locked or staged,
// when the database can tell: when the handle's name is not one of the database's families, or
// its ID cannot be that family's. RocksDB cannot say which database a handle belongs to, so a
// handle of another database whose family has a name of this one and a plausible ID is not caught.
//
// A write is protected by the lock this Txn took on its record: staging it needs a live handle,
// and Commit writes nothing unless every protecting lease is still live, holding each record
// (Handle.Fence) until the batch is written so a successor cannot take it mid-commit. A read is
// protected the same way: Get under a lock whose lease ended fails, and Commit also checks and
// fences every lock the Txn still holds with no write under it. A write to
// a record the Txn never locked fails with ErrNotLocked, unless the Txn was begun with
// TxnOptions.AllowUnlockedWrites: then it is a plain write that never waits for anybody's lock.
//
// Releasing a lock before Commit keeps the writes staged under it valid while its lease lasts,
// but gives up ordering: a successor may already hold the key, and have written it, when they
// land. Keep the lock until Commit unless a successor's write landing first is acceptable.
//
// Locks taken without Options.Hold end with the Txn; held locks survive Commit and Rollback and
// end only by Release or their lease (a later Txn that locks the key waits for them like any other
// Lock). A Txn must end with Commit or Rollback (defer Rollback: it
// is a no-op after Commit), which also releases its locks. A Txn is used by one goroutine.
type Txn struct {
	l      *Locker
	name   string
	locks  keyList[txnLock]     // every handle this Txn took, in order; the latest per record is current
	writes keyList[stagedWrite] // in the order staged; the latest per record is what Get sees
	rare   *txnRare             // nil until the first SetSavePoint or LockRange
	// spare holds the bytes of the first small writes, which then allocate nothing. At 24 bytes
	// (a 16-byte key and an 8-byte value) a Txn fits the 256-byte size class.
	spare  [24]byte
	spareN uint8 // how much of spare is taken
	scans  uint8 // how many Scans of this Txn are running (fn may scan again); see Txn.scan
	done   bool
	// parked: the Txn's commit is in its Locker's commit queue's waiting list (commitQueue.waiting,
	// whose mutex guards it), so a waited-on call for a Txn not there needs no scan of the list.
	parked bool
	// unlockedWrites and mode are TxnOptions.AllowUnlockedWrites and the write options of
	// Commit; both are fixed when the Txn begins.
	unlockedWrites bool
	mode           writeMode
}

// txnRare is what most Txns never use, allocated by the first SetSavePoint or LockRange so that
// a Txn stays in its size class and a Txn that never locked a range pays one nil check for ranges.
type txnRare struct {
	sp   savePoints
	rngs txnRanges
}

// ranges returns the Txn's range locks, or nil when it never locked a range.
func (t *Txn) ranges() *txnRanges {
	if t.rare == nil || len(t.rare.rngs.items) == 0 {
		return nil
	}
	return &t.rare.rngs
}

// rareParts returns t.rare, allocating it.
func (t *Txn) rareParts() *txnRare {
	if t.rare == nil {
		t.rare = &txnRare{}
	}
	return t.rare
}

// TxnOptions configure BeginTx. The zero value is what Begin uses.
type TxnOptions struct {
	// Name labels the Txn in deadlock errors and in the Locker's view of its locks. Empty is
	// allowed.
	Name string
	// Sync makes Commit wait until the write is on stable storage (RocksDB's sync write), so a
	// committed Txn survives a machine crash, not only a process crash.
	Sync bool
	// DisableWAL makes Commit skip RocksDB's write-ahead log: faster, but a crash loses the
	// writes not yet flushed. It cannot be combined with Sync.
	DisableWAL bool
	// AllowUnlockedWrites makes a write to a record the Txn never locked a plain write instead
	// of an ErrNotLocked error. Such a write is not protected by any lock.
	AllowUnlockedWrites bool
}

// txnLock is a handle taken through a Txn.
type txnLock struct {
	h        *Handle
	protects bool // some staged write is protected by h
}

func (x txnLock) entryCF() uint32  { return x.h.cf() }
func (x txnLock) entryKey() []byte { return x.h.key() }

// BeginTx starts a transaction on the Locker's database with opts. It fails with an
// *OptionError, which matches ErrInvalidOptions, when opts asks for both Sync and DisableWAL.
// Like Begin, it does not check whether the Locker is closed: every call on such a Txn but
// Rollback returns ErrClosed.
func (l *Locker) BeginTx(opts TxnOptions) (*Txn, error) {
	mode := writeDefault
	switch {
	case opts.Sync && opts.DisableWAL:
		return nil, &OptionError{Field: "DisableWAL", Value: true, Reason: "cannot be combined with Sync", txn: true}
	case opts.Sync:
		mode = writeSync
	case opts.DisableWAL:
		mode = writeNoWAL
	}
	return &Txn{l: l, name: opts.Name, unlockedWrites: opts.AllowUnlockedWrites, mode: mode}, nil
}

// Begin starts a transaction on the Locker's database with the zero TxnOptions. It never fails:
// once the Locker is closed, every call on the Txn but Rollback returns ErrClosed.
func (l *Locker) Begin() *Txn { return &Txn{l: l} }

// Name returns the Txn's TxnOptions.Name.
func (t *Txn) Name() string { return t.name }

// usable is nil while the Txn may be used, else ErrClosed or ErrTxnDone.
func (t *Txn) usable() error {
	switch {
	case t.l.ten.Closed():
		return ErrClosed
	case t.done:
		return ErrTxnDone
	}
	return nil
}

// Lock locks key for this Txn, as Locker.Lock does, and returns its handle. It is re-entrant: if
// the Txn already holds key with a live handle, that handle is returned without touching the
// key-lock table; with opts.Hold it is first upgraded (Handle.UpgradeToHold(opts.Lease)), which
// keeps its AcquiredAt. A handle that no longer authorizes writes is not reused: Lock takes the
// key anew, writes already staged stay with the old handle, and Commit checks the new one.
//
// A shared request (opts.Shared) for a key the Txn holds in either mode returns the handle it
// has. An exclusive request for a key the Txn holds shared upgrades that handle: it waits, ahead
// of every request queued for the key, until the Txn's share is the only one, and then the handle
// is exclusive with its lease and AcquiredAt unchanged; if the upgrade fails (timeout, ctx,
// deadlock) the handle is still shared and unchanged, and if the share itself ends meanwhile Lock
// fails with ErrLeaseExpired or ErrReleased. A share under a round of the database's coordinator
// is then upgraded in the cluster too (a round joined by hand with JoinClusterRound is the
// caller's, and stays as it is): the coordinator is asked for an exclusive round of the record
// (a Request with Shared false, the column family's name and the key) for what is left of the
// lease, within what is left of the wait. Once it is granted the handle's Token and release hook are the new
// round's, its deadline never moves later, and its shared round is given back; if it is not, the
// upgrade fails as a cluster Lock does (ErrTimeout, the ctx error, ErrClusterUnavailable) and the
// handle is still shared and unchanged, with its shared round.
//
// A key inside a range the Txn holds (Txn.LockRange) with a live handle, in a mode at least as
// strong as opts asks (an exclusive range serves both modes), needs no lock of its own: Lock
// returns the range's handle without touching the key-lock table, after the checks of a
// re-entrant Lock (ErrScopeConflict for cluster scope) and, with opts.Hold, its upgrade to Hold.
//
// It fails as Locker.Lock does (ErrTimeout, the ctx error, ErrInvalidOptions, ErrInvalidKey,
// ErrClosed, ErrTooManyLocks, and with cluster scope ErrClusterUnavailable; a zero opts.Timeout
// with a ctx deadline leaves the wait to the ctx), with ErrTxnDone once the Txn ended, with
// ErrScopeConflict when asking for cluster scope (explicitly, or by default on a database with a
// coordinator) on a key this Txn holds node-scoped, and, if waiting for key would close a cycle
// of Txns waiting for each other, at once with an error matching ErrDeadlock. A Hold upgrade of a
// handle whose lock ended meanwhile fails with ErrLeaseExpired or ErrReleased. On failure nothing
// new is locked and the Txn keeps its other locks.
func (t *Txn) Lock(ctx context.Context, key []byte, opts Options) (*Handle, error) {
	return t.lock(ctx, 0, key, opts)
}

// LockCF is Lock of key in column family cf (nil: the default column family). A cf that cannot
// be a family of the Locker's database fails with an error matching ErrInvalidOptions.
func (t *Txn) LockCF(ctx context.Context, cf *grocksdb.ColumnFamilyHandle, key []byte, opts Options) (*Handle, error) {
	id, err := t.l.columnFamily(cf)
	if err != nil {
		return nil, err
	}
	return t.lock(ctx, id, key, opts)
}

func (t *Txn) lock(ctx context.Context, cf uint32, key []byte, opts Options) (*Handle, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	if ctx == nil {
		return nil, errNilContext
	}
	req := lockRequest{cf: cf, key: key, wait: true, owner: t}
	if cur, ok := t.locks.latest(cf, key); ok {
		if h, err := t.relock(ctx, cur.h, req, opts); h != nil || err != nil {
			return h, err
		}
	}
	if t.ranges() != nil {
		if h, err := t.lockInRange(ctx, req, opts); h != nil || err != nil {
			return h, err
		}
	}
	// Locker.Lock validates key, opts and ctx as relock does, in the same order.
	h, err := t.l.lock(ctx, req, &opts)
	if err != nil {
		return nil, err
	}
	t.locks.add(txnLock{h: h})
	return h, nil
}

// holdsAny reports whether t holds a lock now, of a key (looking from its latest) or a range. A
// wait of t for another key is then handed that key directly when it frees, never passed by a
// newcomer (docs/DESIGN.md §6): whoever waits for t's keys waits for that wait too.
func (t *Txn) holdsAny() bool {
	for i := len(t.locks.items) - 1; i >= 0; i-- {
		if !t.locks.items[i].h.dead() {
			return true
		}
	}
	if rs := t.ranges(); rs != nil {
		for _, l := range rs.items {
			if !l.h.dead() {
				return true
			}
		}
	}
	return false
}

// relock is Lock (or LockRange) of a record (or range) this Txn has locked with h: h itself while
// it authorizes writes (after the scope check and the upgrades opts ask for), else nil and nil so
// that Lock takes it anew.
func (t *Txn) relock(ctx context.Context, h *Handle, req lockRequest, opts Options) (*Handle, error) {
	h, err := t.reusable(ctx, h, req, opts)
	if h == nil || err != nil {
		return nil, err
	}
	if !opts.Shared && h.Shared() {
		if err := t.upgrade(ctx, h, opts); err != nil {
			return nil, err
		}
	}
	if opts.Hold {
		if err := h.UpgradeToHold(opts.Lease); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// reusable is relock without the upgrade: h if it may serve a re-entrant lock request req with
// opts, nil and nil if the key must be taken anew, or the error that forbids the lock.
func (t *Txn) reusable(ctx context.Context, h *Handle, req lockRequest, opts Options) (*Handle, error) {
	r, err := t.l.check(req, opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if h.IsExpired() {
		return nil, nil
	}
	if h.Scope() == ScopeNode && t.wantsCluster(r) {
		return nil, fmt.Errorf("%w: %q is held node-scoped by this transaction", ErrScopeConflict, req.key)
	}
	return h, nil
}

// upgrade makes h, a shared lock of this Txn, exclusive (docs/DESIGN.md §15.3), waiting for the
// other sharers to go within opts.Timeout, or with a zero Timeout and a ctx deadline, within the
// ctx alone (as Locker.Lock waits). An h under a round of the coordinator then asks it for an exclusive
// round within what is left of that wait (§8.5), and gives its shared round back once it has
// one. On failure h is unchanged.
func (t *Txn) upgrade(ctx context.Context, h *Handle, opts Options) error {
	r, err := t.l.opts.resolve(opts)
	if err != nil {
		return err
	}
	var coord Coordinator
	var waitEnd time.Duration // when the cluster half's wait runs out, on the Locker's clock
	if h.coordinated() {
		if coord, err = t.l.upgradeCoordinator(); err != nil {
			return err
		}
		if waitEnd, err = locktable.ClockDeadline(ctx, t.l.clock.Mono(), r.Timeout, opts.Timeout == 0); err != nil {
			return err
		}
	}
	u, err := h.claim.Upgrade(ctx, r.Timeout, opts.Timeout == 0)
	if err != nil || coord == nil {
		return t.l.fromTable(h, err)
	}
	sw, err := t.l.exclusiveRound(ctx, h, coord, waitEnd)
	if err != nil {
		u.Undo()
		return err
	}
	if release := sw.Replaced(); release != nil {
		t.l.ten.RunHook(release)
	}
	return nil
}

// wantsCluster reports whether a lock with options r would be cluster-scoped (or fail closed
// asking for it) on this database now.
func (t *Txn) wantsCluster(r Resolved) bool {
	coord, err := t.l.state.coord.choose(&r)
	return coord != nil || err != nil
}

// Get returns the value of key: this Txn's latest staged write of it if there is one (nil after
// a staged Delete), else the latest committed value in the database (no snapshot: another
// writer's committed change is visible at once). A key that does not exist reads as nil with a
// nil error. The returned slice belongs to the caller.
//
// A Get of a key this Txn holds, by its own lock or inside a range lock, whose lease has ended
// (lapsed or revoked) fails with ErrLeaseExpired rather than return a value no lock protects any
// more; a key the Txn released (a Release that returned true), or never locked, reads
// unprotected. It fails with ErrInvalidKey for an empty key, ErrTxnDone once the Txn ended,
// ErrClosed once the Locker is closed, and with the RocksDB error, wrapped, when the read fails.
func (t *Txn) Get(key []byte) ([]byte, error) { return t.get(nil, key) }

// GetCF is Get of key in column family cf (nil: the default column family). A cf that cannot be
// a family of the Locker's database fails with an error matching ErrInvalidOptions.
func (t *Txn) GetCF(cf *grocksdb.ColumnFamilyHandle, key []byte) ([]byte, error) {
	return t.get(cf, key)
}

func (t *Txn) get(cf *grocksdb.ColumnFamilyHandle, key []byte) ([]byte, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	if len(key) == 0 {
		return nil, invalidKey(key)
	}
	cfID, err := t.l.columnFamily(cf)
	if err != nil {
		return nil, err
	}
	if x, ok := t.locks.latest(cfID, key); ok && !x.h.released() && x.h.IsLeaseExpired() {
		return nil, ErrLeaseExpired
	}
	if t.ranges() != nil {
		if err := t.rangeLeaseEnded(cfID, Range{Start: key, End: append(key[:len(key):len(key)], 0)}); err != nil {
			return nil, err
		}
	}
	if w, ok := t.writes.latest(cfID, key); ok {
		if w.del {
			return nil, nil
		}
		return bytes.Clone(w.value()), nil
	}
	if cf == nil {
		v, err := t.l.db.GetBytes(defaultReadOptions(), key)
		if err != nil {
			return nil, fmt.Errorf("recordlock: get: %w", err)
		}
		return v, nil
	}
	s, err := t.l.db.GetCF(defaultReadOptions(), cf, key)
	if err != nil {
		return nil, fmt.Errorf("recordlock: get: %w", err)
	}
	defer s.Free()
	if !s.Exists() {
		return nil, nil
	}
	return append([]byte{}, s.Data()...), nil
}

// Rollback discards the staged writes, releases the Txn's locks that were not taken with Hold,
// and ends the Txn. It is idempotent and safe after Commit and after the Locker's Close.
func (t *Txn) Rollback() {
	if !t.done {
		t.end()
	}
}

// end ends the Txn: it drops the staged writes and releases non-hold locks.
func (t *Txn) end() {
	t.done = true
	endLocks(t.locks.items)
	if rs := t.ranges(); rs != nil {
		endLocks(rs.items)
	}
	t.locks = keyList[txnLock]{}
	t.writes = keyList[stagedWrite]{}
	t.rare = nil
	t.l.state.txns.ended(t)
}

// endLocks releases the locks of an ending Txn that were not taken with Hold, and disowns them
// all: a held lock outlives the Txn with no owner. A released or expired handle has nothing to
// give back (Commit may have released it).
func endLocks(items []txnLock) {
	for _, x := range items {
		x.h.disown(false)
	}
}
