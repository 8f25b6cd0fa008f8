package recordlock

import (
	"bytes"
	"fmt"

	"github.com/linxGnu/grocksdb"
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
