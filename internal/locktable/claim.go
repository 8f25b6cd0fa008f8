package locktable

import (
	"sync/atomic"
	"time"
	"unsafe"
)

// Claim is the table's record of one lock: a request for a key while it waits, the key's holder
// (or one of its sharers) once granted, until it is given back. The API's lock handle embeds one,
// which keeps an uncontended lock to one allocation. Its exported methods are the whole of what
// the API asks of a lock; each takes the shard mutex itself when it needs it, and they are safe
// for concurrent use. Tenant.Prepare readies one for its request.
//
// Invariants, whenever its shard's mutex is released (checked from the shard's entries, heaps and
// range spaces in a build with the tag invariants: shard_check.go):
//   - A key's holder is one of its entry's holders (e), marked flagHeld, with no request (w); a
//     range lock is marked flagHeld, in its space's tree of its mode and in the live cover.
//   - A waiting claim's w is its request, queued for its entry's key, or in its space's queue
//     and tree of queued requests for a range request.
//   - heapIdx is its place on the heap of its clock's scheduler in its shard, or -1; a claim on
//     a heap holds or waits, and its place there is ordered by dueAt.
//   - No two claims that hold keys or ranges that meet conflict (conflicts): the holders of a key
//     share it or one holds it alone, and no range lock conflicts with a range lock or a key's
//     lock it meets, unless the table's range conflicts are off (DisableRangeConflicts).
type Claim struct {
	// Set by prepare, never changed: read without a lock. The key is a pointer and a length rather
	// than a slice, which keeps the API's handle within 128 bytes (see key).
	ten    *Tenant
	keyPtr *byte
	keyLen uint32
	// heapIdx is guarded by the shard mutex; it sits here to share a word with keyLen.
	heapIdx int32    // position in its scheduler's heap, -1 when not scheduled
	keyBuf  [19]byte // short keys live here, so a lock allocates only its handle
	// leaseHi and leaseLo are guarded by the shard mutex; they share a word with keyBuf (see
	// AskedLease).
	leaseHi uint8
	leaseLo uint32
	// hash places the record in its shard: set by Acquire before the claim is published, and
	// changed only with the mutexes of its key shard and its home shard held, when a range brings
	// it in (rangeadopt.go): read it with hashNow, except under the mutex; see lockShard.
	hash uint64
	cf   uint32 // column family ID: a record is (cf, key)

	// Written under the shard mutex, read without it: the flags below in the low bits, a
	// sharer's place in the high ones (holders.go).
	state atomic.Uint32
	// deadline is the Mono of the tenant's clock at which the lease lapses; while the request
	// waits, it is when that wait times out. The scheduler's heap is ordered by it.
	deadline atomic.Int64

	// Guarded by the shard mutex.
	e          *keyEntry // the table entry of its key while it holds or waits for it
	owner      Owner     // the owner that took it, until Disown; nil for none
	expiresAt  int64     // wall Unix nanoseconds, informational
	acquiredAt int64     // a Timestamp of the database
	w          *waiter   // set while the request waits
	cold       *Cold
}

// Owner is a holder that can wait for another holder, as the wait-for graph sees it (a Txn). Two
// claims with the same owner never wait for each other. An Owner is a pointer to an object of its
// own: the graph tells owners apart by that pointer (ownerKey).
type Owner interface {
	// Name labels the owner in a DeadlockError.
	Name() string
}

// Cold is what most claims never need, allocated on first use under the shard mutex; once set,
// the pointer never changes. Keeping it out of Claim keeps the one allocation of an uncontended
// lock small.
type Cold struct {
	done     chan struct{} // closed when the claim stops authorizing writes
	fenceEnd chan struct{} // closed when the running fence ends, for Release waiting on it
	// userFence says that the running fence's commit is a user's, which may call back into the
	// claim (commitframe.go).
	userFence bool
	// hook runs once the claim ends, outside every table mutex (a cluster round's release).
	hook func() error

	ledger *ledger // its joined round and version stamps, from the first on

	span *span // a range claim's key set, from prepareRange on
}

// A claim is dead, and authorizes no new write, once it is released or expired. The key goes back
// to the table when it dies, except that a lease ending inside a fence keeps the key until the
// fence ends (flagPassOnAfterFence).
const (
	flagHeld             uint32 = 1 << iota // the table's holder of the key
	flagReleased                            // given back deliberately: Release or Close
	flagExpired                             // the lease ended: lapsed or revoked
	flagFencing                             // inside a fence
	flagPassOnAfterFence                    // expired inside a fence: pass the key on when it ends
	flagHold                                // the lock outlives its owner
	flagCluster                             // joined a cluster round (round.go)
	flagHasVersion                          // a version was issued or noted (versions.go)
	flagShared                              // a shared lock, until upgraded
	// flagOwnerHolds marks a request whose owner held other keys when it asked: while it is
	// queued, no newcomer passes the key's oldest waiter (docs/DESIGN.md §6).
	flagOwnerHolds
)

// Ask is what a request asks for besides its record, as Tenant.Prepare takes it.
type Ask uint32

const (
	AskHold       = Ask(flagHold)       // the lock outlives its owner
	AskShared     = Ask(flagShared)     // a shared lock
	AskOwnerHolds = Ask(flagOwnerHolds) // the owner holds other keys as it asks
	// AskCounted: the request takes a room its tenant reserved in its bound (Tenant.Reserve).
	AskCounted = Ask(flagCounted)
	askBits    = AskHold | AskShared | AskOwnerHolds | AskCounted
)

// Prepare readies h, before it is published, for a request of t for the record (cf, key), taken
// by owner o (nil for none). Acquire then takes it. It is small enough to inline.
func (t *Tenant) Prepare(h *Claim, o Owner, cf uint32, key []byte, ask Ask) {
	h.prepare(t, cf, key, uint32(ask&askBits))
	if o != nil { // h is zero: storing no owner would cost a write barrier's check for nothing
		h.owner = o
	}
}

// PrepareRange is Prepare for the keys k of column family cf with start <= k < end (end nil: no
// upper bound); the caller has checked that end is nil or after start.
func (t *Tenant) PrepareRange(h *Claim, o Owner, cf uint32, start, end []byte, ask Ask) {
	h.prepareRange(t, cf, start, end, uint32(ask&askBits))
	h.owner = o
}

// prepare readies h, before it is published, for a request of tenant t for the record (cf, key)
// with the given initial flags (flagHold, flagShared, flagOwnerHolds). It leaves the record's
// hash to Acquire, so that it is small enough to inline.
func (h *Claim) prepare(t *Tenant, cf uint32, key []byte, flags uint32) {
	h.ten, h.heapIdx, h.cf = t, -1, cf
	h.setKey(key)
	if flags != 0 {
		h.state.Store(flags)
	}
}

func (h *Claim) flags() uint32 { return h.state.Load() }

// setFlags and clearFlags change flags with the shard mutex held, so a plain load and store
// suffice.
func (h *Claim) setFlags(f uint32)   { h.state.Store(h.state.Load() | f) }
func (h *Claim) clearFlags(f uint32) { h.state.Store(h.state.Load() &^ f) }

// replaceFlags sets the flags of mask to those of f, with the shard mutex held.
func (h *Claim) replaceFlags(mask, f uint32) { h.state.Store(h.flags()&^mask | f&mask) }

// dead reports whether the claim was released or its lease ended, as far as its flags know: a
// lapse that nothing has settled yet is not in them.
func (h *Claim) dead() bool { return h.flags()&(flagReleased|flagExpired) != 0 }

// Record returns the locked record: its column family, its key (a range's start) and, for a
// range, the end of its span (nil for no upper bound, and for a key). The caller must not modify
// them. Set before the claim is published, they are read without a lock.
func (h *Claim) Record() (cf uint32, key, end []byte) {
	if h.flags()&flagRange != 0 {
		end = h.cold.span.End
	}
	return h.cf, h.key(), end
}

func (h *Claim) key() []byte { return unsafe.Slice(h.keyPtr, h.keyLen) }

// setKey stores a copy of key.
func (h *Claim) setKey(key []byte) {
	buf := h.keyBuf[:]
	if len(key) > len(buf) {
		buf = make([]byte, len(key))
	}
	copy(buf, key)
	h.keyPtr, h.keyLen = unsafe.SliceData(buf), uint32(len(key))
}

// The lease a lock was taken, extended or renewed with, as asked (before any clamp to a round),
// bounds the rounds it may join. It is kept exactly, in nanoseconds, in 40 bits (leaseHi, leaseLo)
// taken from keyBuf's word: a lease of up to MaxAskedLease needs no more, and a whole int64 would
// take 8 bytes from keyBuf, and so a second allocation per lock for keys of 17 to 24 bytes, to keep
// the claim within 128 bytes. A coarser unit would fit in 32 bits but not hold every lease exactly.

// MaxAskedLease is the longest lease a claim records exactly as asked.
const MaxAskedLease = time.Duration(1<<40 - 1)

// askedLease returns the lease recorded by setAskedLease.
func (h *Claim) askedLease() time.Duration {
	return time.Duration(h.leaseHi)<<32 | time.Duration(h.leaseLo)
}

// setAskedLease records lease, at most MaxAskedLease, before h is published or with the shard
// mutex held.
func (h *Claim) setAskedLease(lease time.Duration) {
	h.leaseHi, h.leaseLo = uint8(lease>>32), uint32(lease)
}

// dueAt is when the scheduler must look at h, read with the shard mutex held: its lease end, or
// its wait's timeout.
func (h *Claim) dueAt() time.Duration { return time.Duration(h.deadline.Load()) }

// coldPart returns h's cold part, allocating it, with the shard mutex held.
func (h *Claim) coldPart() *Cold {
	if h.cold == nil {
		h.cold = &Cold{}
	}
	return h.cold
}

// ledger is what a claim keeps of its joined cluster round and its version stamps: few claims
// have either, so it is allocated on first use, which keeps Cold, and so every range claim, small.
type ledger struct {
	// The joined cluster round (round.go): its TsR, fencing token, deadline and ExpiresAt, the
	// caps of later lease extensions.
	tsR            int64
	hasTsR         bool
	coordinated    bool // the round is the Coordinator's (Round.Coordinated)
	token          uint64
	roundEnd       time.Duration
	roundExpiresAt int64
	// The holder's version stamps (versions.go).
	lastVer int64 // valid with flagHasVersion
	floor   int64 // the candidate floor
}

// ledgerPart returns h's ledger, made now if it has none, with the shard mutex held.
func (h *Claim) ledgerPart() *ledger {
	c := h.coldPart()
	if c.ledger == nil {
		c.ledger = &ledger{}
	}
	return c.ledger
}

// ledgerIfAny returns h's ledger, nil if it has none, with the shard mutex held.
func (h *Claim) ledgerIfAny() *ledger {
	if c := h.cold; c != nil {
		return c.ledger
	}
	return nil
}

// monoFor returns the Mono of h's clock, given mono, a reading of c's clock: the same reading
// when both tenants run on one clock.
func (h *Claim) monoFor(c *Tenant, mono time.Duration) time.Duration {
	if h.ten.clockID == c.clockID {
		return mono
	}
	return h.ten.clock.Mono()
}

// closeDone closes the channel Done returned, if any, with the shard mutex held.
func (h *Claim) closeDone() {
	if h.cold != nil && h.cold.done != nil {
		close(h.cold.done)
		h.cold.done = nil
	}
}

// lapsed reports whether the lease deadline has passed, by h's own clock.
func (h *Claim) lapsed() bool { return h.lapsedAt(h.ten.clock.Mono()) }

// lapsedAt reports whether the lease deadline is not after now, a Mono of h's clock.
func (h *Claim) lapsedAt(now time.Duration) bool { return now >= time.Duration(h.deadline.Load()) }

// WaitedOn reports whether a request is queued for the key h holds or waits for.
func (h *Claim) WaitedOn() bool {
	sh := h.lockShard()
	defer sh.mu.Unlock()
	if h.flags()&flagRange != 0 {
		if sp := sh.spaces[h.cf]; sp != nil && h.flags()&flagHeld != 0 {
			return sp.rangeWaiters(h) > 0
		}
		return false
	}
	return h.e != nil && h.e.head != nil // the entry's wait queue: requests only, not holders
}
