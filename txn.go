package recordlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/linxGnu/grocksdb"
)

// Txn is a read-modify-write transaction over the Locker's database: it locks records, reads
// them, stages writes, and commits the writes as one RocksDB WriteBatch that lands only while
// the lease of every lock protecting them is live.
//
// A write staged to a key this Txn has locked is protected by that lock: staging it needs a live
// handle, and Commit writes nothing unless every protecting lease is still live, holding each
// key (Handle.Fence) until the batch is written so a successor cannot take it mid-commit. A
// write to a key the Txn has not locked is a plain write and never waits for anybody's lock.
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
	locks  keyList[txnLock]     // every handle this Txn took, in order; the latest per key is current
	writes keyList[stagedWrite] // in the order staged; the latest per key is what Get sees
	spare  [32]byte             // holds the bytes of the first small writes, which then allocate nothing
	spareN uint8                // how much of spare is taken
	done   bool
}

// txnLock is a handle taken through a Txn.
type txnLock struct {
	h        *Handle
	protects bool // some staged write is protected by h
}

func (x txnLock) entryKey() []byte { return x.h.key }

// stagedWrite is one Put or Delete waiting for Commit. Which handle protects it is decided when
// it is staged, by marking that handle's txnLock.
type stagedWrite struct {
	kv   []byte // a copy of the key, then of the value
	klen int
	del  bool
}

func (w stagedWrite) entryKey() []byte { return w.kv[:w.klen:w.klen] }

func (w stagedWrite) value() []byte { return w.kv[w.klen:] }

// Begin starts a transaction on the Locker's database. It never fails: once the Locker is closed,
// every call on the Txn but Rollback returns ErrClosed.
func (l *Locker) Begin() *Txn { return &Txn{l: l} }

// name is the Txn's name in deadlock errors.
func (t *Txn) name() string { return "" }

// usable is nil while the Txn may be used, else ErrClosed or ErrTxnDone.
func (t *Txn) usable() error {
	switch {
	case t.l.closed.Load():
		return ErrClosed
	case t.done:
		return ErrTxnDone
	}
	return nil
}

// Lock locks key for this Txn, as Locker.Lock does, and returns its handle. It is re-entrant: if
// the Txn already holds key with a live handle, that handle is returned without touching the
// key-lock table; with opts.Hold it is first upgraded (Handle.UpgradeToHold(opts.Lease)), which
// keeps its AcquiredAt. Asking for cluster scope (explicitly, or by default on a database with a
// coordinator) on a key this Txn holds node-scoped fails with ErrScopeConflict. A handle that no
// longer authorizes writes is not reused: Lock takes the key anew, and writes already staged stay
// with the old handle. On failure nothing new is locked.
func (t *Txn) Lock(ctx context.Context, key []byte, opts Options) (*Handle, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	if cur, ok := t.locks.latest(key); ok {
		if h, err := t.relock(ctx, cur.h, key, opts); h != nil || err != nil {
			return h, err
		}
	}
	// Locker.Lock validates key, opts and ctx as relock does, in the same order.
	h, err := t.l.lock(ctx, lockRequest{key: key, wait: true, owner: t}, opts)
	if err != nil {
		return nil, err
	}
	t.locks.add(txnLock{h: h})
	return h, nil
}

// relock is Lock of a key this Txn has locked with h: h itself while it authorizes writes (after
// the scope check and the upgrade opts ask for), else nil and nil so that Lock takes the key anew.
func (t *Txn) relock(ctx context.Context, h *Handle, key []byte, opts Options) (*Handle, error) {
	r, err := t.l.check(key, opts)
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
		return nil, fmt.Errorf("%w: %q is held node-scoped by this transaction", ErrScopeConflict, key)
	}
	if opts.Hold {
		if err := h.UpgradeToHold(opts.Lease); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// wantsCluster reports whether a lock with options r would be cluster-scoped (or fail closed
// asking for it) on this database now.
func (t *Txn) wantsCluster(r Resolved) bool {
	coord, err := t.l.tab.db.coord.resolve(r)
	return coord != nil || err != nil
}

// Get returns the value of key: this Txn's latest staged write of it if there is one (nil after
// a staged Delete), else the latest committed value in the database (no snapshot: another
// writer's committed change is visible at once). A key that does not exist reads as nil with a
// nil error. The returned slice belongs to the caller.
func (t *Txn) Get(key []byte) ([]byte, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	if len(key) == 0 {
		return nil, ErrInvalidKey
	}
	if w, ok := t.writes.latest(key); ok {
		if w.del {
			return nil, nil
		}
		return bytes.Clone(w.value()), nil
	}
	v, err := t.l.db.GetBytes(defaultReadOptions(), key)
	if err != nil {
		return nil, fmt.Errorf("recordlock: get: %w", err)
	}
	return v, nil
}

// Put stages key=value for Commit. If this Txn locked key, the write is protected by that lock,
// which must still authorize writes: otherwise Put fails with ErrReleased or ErrLeaseExpired and
// stages nothing. The caller may reuse key and value once Put returns.
func (t *Txn) Put(key, value []byte) error { return t.stage(key, value, false) }

// Delete stages the deletion of key for Commit, under the same rules as Put.
func (t *Txn) Delete(key []byte) error { return t.stage(key, nil, true) }

func (t *Txn) stage(key, value []byte, del bool) error {
	if err := t.usable(); err != nil {
		return err
	}
	if len(key) == 0 {
		return ErrInvalidKey
	}
	i := t.locks.find(key) // a write to a key this Txn locked is protected by its latest handle
	if i >= 0 {
		if h := t.locks.items[i].h; h.IsExpired() {
			if h.IsLeaseExpired() {
				return ErrLeaseExpired
			}
			return ErrReleased
		}
	}
	t.writes.add(stagedWrite{kv: t.copyOf(key, value), klen: len(key), del: del})
	if i >= 0 {
		t.locks.items[i].protects = true
	}
	return nil
}

// copyOf returns a copy of key and value back to back: in spare while it has room, else in one
// new allocation.
func (t *Txn) copyOf(key, value []byte) []byte {
	n := len(key) + len(value)
	var buf []byte
	if off := int(t.spareN); n <= len(t.spare)-off {
		buf = t.spare[off : off+n : off+n]
		t.spareN += uint8(n)
	} else {
		buf = make([]byte, n)
	}
	copy(buf[copy(buf, key):], value)
	return buf
}

// Commit writes the staged writes atomically (one WriteBatch when there are several), then releases the Txn's locks
// that were not taken with Hold, and ends the Txn.
//
// If the lease of any lock protecting a staged write has ended (lapsed or revoked), Commit writes
// nothing, still releases the locks, and returns ErrLeaseExpired. Otherwise the batch is written
// inside the fences of every protecting handle (Handle.Fence), entered in key order: no key
// passes to a successor until the write has returned. With nothing staged Commit only releases
// the locks. After the Locker's Close it writes nothing and returns ErrClosed; on a Txn that
// already ended it returns ErrTxnDone. Either way, a Txn that Commit was called on has ended.
func (t *Txn) Commit() error {
	if err := t.usable(); err != nil {
		if errors.Is(err, ErrClosed) {
			t.end()
		}
		return err
	}
	defer t.end()
	if len(t.writes.items) == 0 {
		return nil
	}
	var buf [4]*Handle
	// No separate lease check first: each Fence refuses with ErrLeaseExpired before anything
	// inside it runs, and the write is innermost, so one lapsed lease writes nothing.
	return fenced(t.protectors(buf[:0]), t.fencedWrite)
}

// fencedWrite is what Commit runs inside the fences: the write of the staged writes.
func (t *Txn) fencedWrite() error {
	// Checked inside the fences: Close releases these handles only after the write returns.
	if t.l.closed.Load() {
		return ErrClosed
	}
	if hook := t.l.hooks.inFence; hook != nil {
		hook()
	}
	if err := t.write(); err != nil {
		return fmt.Errorf("recordlock: commit: %w", err)
	}
	return nil
}

// write writes the staged writes atomically: a single one directly, several as one WriteBatch.
func (t *Txn) write() error {
	db, wo := t.l.db, defaultWriteOptions()
	if len(t.writes.items) == 1 {
		w := t.writes.items[0]
		if w.del {
			return db.Delete(wo, w.entryKey())
		}
		return db.Put(wo, w.entryKey(), w.value())
	}
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	for _, w := range t.writes.items {
		if w.del {
			wb.Delete(w.entryKey())
		} else {
			wb.Put(w.entryKey(), w.value())
		}
	}
	return db.Write(wo, wb)
}

// defaultReadOptions and defaultWriteOptions are made once and shared by every Txn of the
// process: RocksDB only reads them, and making and destroying a pair per transaction cost four
// cgo calls on every read-modify-write. They live as long as the process.
var (
	defaultReadOptions  = sync.OnceValue(grocksdb.NewDefaultReadOptions)
	defaultWriteOptions = sync.OnceValue(grocksdb.NewDefaultWriteOptions)
)

// fenced runs write inside the fences of hs, hs[0] outermost. One protector, the usual case,
// fences write itself rather than a closure around the rest of hs.
func fenced(hs []*Handle, write func() error) error {
	switch len(hs) {
	case 0:
		return write()
	case 1:
		// The Txn releases its locks without Hold when Commit returns anyway; doing it as the
		// fence ends saves a round trip through the shard.
		return hs[0].fenceThenRelease(write)
	}
	return hs[0].Fence(func() error { return fenced(hs[1:], write) })
}

// protectors appends to hs the handles protecting staged writes, each once, sorted by key so
// that fences nest in a deterministic order; handles of one key keep the order they were taken in.
func (t *Txn) protectors(hs []*Handle) []*Handle {
	for _, x := range t.locks.items {
		if x.protects {
			hs = append(hs, x.h)
		}
	}
	slices.SortStableFunc(hs, func(a, b *Handle) int { return bytes.Compare(a.key, b.key) })
	return hs
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
	for _, x := range t.locks.items {
		// A released or expired handle has nothing to give back (Commit may have released it).
		if x.h.flags()&(flagHold|flagReleased|flagExpired) == 0 {
			x.h.Release()
		}
		x.h.disown() // a held lock outlives the Txn with no owner
	}
	t.locks = keyList[txnLock]{}
	t.writes = keyList[stagedWrite]{}
}

// keyed is an entry of a keyList.
type keyed interface{ entryKey() []byte }

// scanLimit is how many entries a keyList scans before it builds a map.
const scanLimit = 8

// keyList keeps entries in insertion order and finds the latest with a given key: by a backward
// scan while it is short (most transactions touch a few keys), by a map once it is longer.
type keyList[T keyed] struct {
	items []T
	index map[string]int // key → position of its latest entry, once len(items) > scanLimit
	small [2]T           // the first entries, so a small Txn allocates no slice
}

// find returns the position of the latest entry with key, or -1.
func (s *keyList[T]) find(key []byte) int {
	if s.index != nil {
		if i, ok := s.index[string(key)]; ok {
			return i
		}
		return -1
	}
	for i := len(s.items) - 1; i >= 0; i-- {
		if bytes.Equal(s.items[i].entryKey(), key) {
			return i
		}
	}
	return -1
}

// latest returns the latest entry with key.
func (s *keyList[T]) latest(key []byte) (T, bool) {
	if i := s.find(key); i >= 0 {
		return s.items[i], true
	}
	var zero T
	return zero, false
}

func (s *keyList[T]) add(x T) {
	if s.items == nil {
		s.items = s.small[:0]
	}
	s.items = append(s.items, x)
	switch {
	case s.index != nil:
		s.index[string(x.entryKey())] = len(s.items) - 1
	case len(s.items) > scanLimit:
		s.index = make(map[string]int, 2*len(s.items))
		for i, it := range s.items {
			s.index[string(it.entryKey())] = i
		}
	}
}
