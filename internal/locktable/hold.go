package locktable

import (
	"sync/atomic"
	"time"
	"unsafe"
)

// Hold is the table's record of one lock: a request for a key while it waits, the key's holder
// (or one of its sharers) once granted, until it is given back. The API's lock handle embeds one,
// which keeps an uncontended lock to one allocation. Its methods are safe for concurrent use
// unless their comment says the shard mutex must be held (Lock and Unlock take and release it).
type Hold struct {
	// Set by Init, never changed: read without a lock. The key is a pointer and a length rather
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
	// hash places the record in its shard: set by Acquire before the hold is published, and
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
// holds with the same owner never wait for each other. An Owner is a pointer to an object of its
// own: the graph tells owners apart by that pointer (ownerKey).
type Owner interface {
	// Name labels the owner in a DeadlockError.
	Name() string
}

// Cold is what most holds never need, allocated on first use under the shard mutex; once set,
// the pointer never changes. Keeping it out of Hold keeps the one allocation of an uncontended
// lock small.
type Cold struct {
	done     chan struct{} // closed when the hold stops authorizing writes
	fenceEnd chan struct{} // closed when the running fence ends, for Release waiting on it
	fencer   int64         // the goroutine whose commit the running fence runs; 0 for none
	// Hook runs once the hold ends, outside every table mutex (a cluster round's release).
	Hook func() error

	// Kept for the API, which alone reads and writes them (under the shard mutex): the joined
	// cluster round (its TsR, fencing token, deadline and ExpiresAt, the caps of later lease
	// extensions) and the holder's version stamps.
	TsR            int64
	HasTsR         bool
	Token          uint64
	RoundEnd       time.Duration
	RoundExpiresAt int64
	LastVer        int64 // valid with FlagHasVersion
	Floor          int64 // the candidate floor

	span *span // a range hold's key set, from InitRange on
}

// A hold is dead, and authorizes no new write, once it is released or expired. The key goes back
// to the table when it dies, except that a lease ending inside a fence keeps the key until the
// fence ends (FlagPassOnAfterFence).
const (
	FlagHeld             uint32 = 1 << iota // the table's holder of the key
	FlagReleased                            // given back deliberately: Release or Close
	FlagExpired                             // the lease ended: lapsed or revoked
	FlagFencing                             // inside a fence
	FlagPassOnAfterFence                    // expired inside a fence: pass the key on when it ends
	FlagHold                                // the lock outlives its owner
	FlagCluster                             // joined a cluster round (the API's; the table ignores it)
	FlagHasVersion                          // a version was issued or noted (the API's)
	FlagShared                              // a shared lock, until upgraded
	// FlagOwnerHolds marks a request whose owner held other keys when it asked: while it is
	// queued, no newcomer passes the key's oldest waiter (docs/DESIGN.md §6).
	FlagOwnerHolds
)

// Init readies h, before it is published, for a request of tenant t for the record (cf, key)
// with the given initial flags (FlagHold, FlagShared, FlagOwnerHolds). SetOwner then names its
// owner, if any. It leaves the record's hash to Acquire, so that it is small enough to inline.
func (h *Hold) Init(t *Tenant, cf uint32, key []byte, flags uint32) {
	h.ten, h.heapIdx, h.cf = t, -1, cf
	h.setKey(key)
	if flags != 0 {
		h.state.Store(flags)
	}
}

// Flags returns the hold's flags, without its sharer's place.
func (h *Hold) Flags() uint32 { return h.flags() & flagBits }

func (h *Hold) flags() uint32 { return h.state.Load() }

// SetFlags and ClearFlags change flags with the shard mutex held, so a plain load and store
// suffice.
func (h *Hold) SetFlags(f uint32)   { h.state.Store(h.state.Load() | f) }
func (h *Hold) ClearFlags(f uint32) { h.state.Store(h.state.Load() &^ f) }

// ReplaceFlags sets the flags of mask to those of f, with the shard mutex held.
func (h *Hold) ReplaceFlags(mask, f uint32) { h.state.Store(h.flags()&^mask | f&mask) }

// Dead reports whether the hold was released or its lease ended, as far as its flags know: a
// lapse that nothing has settled yet is not in them.
func (h *Hold) Dead() bool { return h.flags()&(FlagReleased|FlagExpired) != 0 }

// Released reports whether the hold was given back deliberately: by a Release that returned
// true, or by the tenant's Close, which releases the same way. A lease that ended first leaves it
// false.
func (h *Hold) Released() bool { return h.flags()&FlagReleased != 0 }

// Tenant is the tenant h belongs to.
func (h *Hold) Tenant() *Tenant { return h.ten }

// SetOwner makes o the owner of h, before h is published.
func (h *Hold) SetOwner(o Owner) { h.owner = o }

// Owner is the owner that took h, until Disown; nil for none. Read with the shard mutex held.
func (h *Hold) Owner() Owner { return h.owner }

// CF is the record's column family ID.
func (h *Hold) CF() uint32 { return h.cf }

// Key is the locked key. The caller must not modify it.
func (h *Hold) Key() []byte { return unsafe.Slice(h.keyPtr, h.keyLen) }

func (h *Hold) key() []byte { return unsafe.Slice(h.keyPtr, h.keyLen) }

// setKey stores a copy of key.
func (h *Hold) setKey(key []byte) {
	buf := h.keyBuf[:]
	if len(key) > len(buf) {
		buf = make([]byte, len(key))
	}
	copy(buf, key)
	h.keyPtr, h.keyLen = unsafe.SliceData(buf), uint32(len(key))
}

// The lease a lock was taken, extended or renewed with, as asked (before any clamp to a round),
// bounds the rounds it may join. It is kept exactly, in nanoseconds, in 40 bits (leaseHi,
// leaseLo) taken from keyBuf's word: a lease of up to MaxAskedLease needs no more, and a whole
// int64 would have cost keyBuf 8 bytes, and keys of 17 to 24 bytes a second allocation per lock,
// to stay within 128 bytes. A coarser unit would fit in 32 bits but not hold every lease exactly.

// MaxAskedLease is the longest lease AskedLease records exactly.
const MaxAskedLease = time.Duration(1<<40 - 1)

// AskedLease returns the lease recorded by SetAskedLease.
func (h *Hold) AskedLease() time.Duration {
	return time.Duration(h.leaseHi)<<32 | time.Duration(h.leaseLo)
}

// SetAskedLease records lease, at most MaxAskedLease, before h is published or with the shard
// mutex held.
func (h *Hold) SetAskedLease(lease time.Duration) {
	h.leaseHi, h.leaseLo = uint8(lease>>32), uint32(lease)
}

// Deadline is the Mono of the tenant's clock at which the lease lapses.
func (h *Hold) Deadline() time.Duration { return time.Duration(h.deadline.Load()) }

// dueAt is when the scheduler must look at h: its lease end, or its wait's timeout.
func (h *Hold) dueAt() time.Duration { return time.Duration(h.deadline.Load()) }

// AcquiredAt, SetAcquiredAt, ExpiresAt and SetExpiresAt read and write, with the shard mutex
// held, the Timestamp minted when the key was granted and the wall-clock end of the lease (Unix
// nanoseconds), both informational: enforcement uses Deadline.
func (h *Hold) AcquiredAt() int64       { return h.acquiredAt }
func (h *Hold) SetAcquiredAt(ts int64)  { h.acquiredAt = ts }
func (h *Hold) ExpiresAt() int64        { return h.expiresAt }
func (h *Hold) SetExpiresAt(wall int64) { h.expiresAt = wall }

// Cold returns h's cold part, allocating it, with the shard mutex held.
func (h *Hold) Cold() *Cold {
	if h.cold == nil {
		h.cold = &Cold{}
	}
	return h.cold
}

// ColdIfAny returns h's cold part, or nil if it has none, with the shard mutex held.
func (h *Hold) ColdIfAny() *Cold { return h.cold }

// monoFor returns the Mono of h's clock, given mono, a reading of c's clock: the same reading
// when both tenants run on one clock.
func (h *Hold) monoFor(c *Tenant, mono time.Duration) time.Duration {
	if h.ten.clockID == c.clockID {
		return mono
	}
	return h.ten.clock.Mono()
}

func (h *Hold) closeDone() {
	if h.cold != nil && h.cold.done != nil {
		close(h.cold.done)
		h.cold.done = nil
	}
}

// Lapsed reports whether the lease deadline has passed, by h's own clock.
func (h *Hold) Lapsed() bool { return h.lapsedAt(h.ten.clock.Mono()) }

// lapsedAt reports whether the lease deadline is not after now, a Mono of h's clock.
func (h *Hold) lapsedAt(now time.Duration) bool { return now >= time.Duration(h.deadline.Load()) }

// Disown ends h's ownership by its owner, when the owner ends and the lock outlives it.
func (h *Hold) Disown() {
	if h.owner == nil {
		return
	}
	sh := h.lockShard()
	h.owner = nil
	sh.mu.Unlock()
}

// closedChan is what Done returns for a hold that is already dead.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Done returns a channel that is closed as soon as h stops authorizing writes: release, lease
// lapse or revocation.
func (h *Hold) Done() <-chan struct{} {
	sh := h.lockShard()
	defer sh.unlockAndRunDeferred()
	if h.Dead() || h.settle(sh) {
		return closedChan
	}
	c := h.Cold()
	if c.done == nil {
		c.done = make(chan struct{})
		sh.watch(h) // the channel must close at the deadline
	}
	return c.done
}

// Watch arms h's lease deadline on its clock's timer, with the shard mutex held, for the API to
// observe the lease ending (a release hook was set).
func (h *Hold) Watch() { h.shard().watch(h) }

// IsExpired reports whether h can no longer authorize a new write, evaluated now: released,
// revoked, or past its deadline. Finding the deadline passed, it completes the expiry (gives the
// key back and fires the release hook) before it returns true.
func (h *Hold) IsExpired() bool {
	if h.Dead() {
		return true
	}
	if !h.Lapsed() {
		return false
	}
	h.settleNow()
	return true
}

// IsLeaseExpired reports whether the lease has ended, by lapse or revocation, completing an
// expiry it finds as IsExpired does. A Release alone does not make it true.
func (h *Hold) IsLeaseExpired() bool {
	if h.flags()&FlagExpired != 0 {
		return true
	}
	if !h.Lapsed() {
		return false
	}
	h.settleNow()
	return true
}

// Release gives the key back. It returns true the first time; false when h was already released,
// expired or revoked, or is past its deadline (it then completes the expiry). If another
// goroutine is inside a fence on h, Release waits for the fence to end.
func (h *Hold) Release() bool {
	hash := h.hashNow()
	sh := h.ten.tab.shard(hash)
	// The clock is read before the mutex, which keeps the read out of the critical section that
	// every lock and release of the shard's keys queues behind. Release takes effect at that
	// reading: an expiry anyone observed since then was settled under the mutex and is seen below.
	// Waiting out a fence can take long, so the clock is read again after one.
	now := h.ten.clock.Mono()
	sh.mu.Lock()
	inOwnFence := false
	if h.hash != hash || h.flags()&FlagFencing != 0 { // lockForChange, its common case spelled out
		sh.mu.Unlock()
		var waited bool
		if sh, waited, inOwnFence = h.lockForChange(); waited {
			now = h.ten.clock.Mono()
		}
	}
	ok := !h.Dead() && !h.settleAt(sh, now)
	switch {
	case ok && inOwnFence:
		h.releaseInOwnFence(sh)
	case ok:
		h.releaseLocked(sh)
	}
	sh.unlockAndRunDeferred()
	return ok
}

// releaseLocked gives back the key of a live holder, with the shard mutex held.
func (h *Hold) releaseLocked(sh *shard) {
	sh.unschedule(h)
	sh.giveBack(h, FlagReleased)
	h.closeDone() // after the flag: a reader woken by Done finds the hold released
	sh.deferHook(h)
}

// Revoke ends h's authority ahead of its lease. If the key is still held it is given back and the
// release hook fires; after a Release it only settles the flag. It waits for a fence running in
// another goroutine. Idempotent.
func (h *Hold) Revoke() {
	sh, _, inOwnFence := h.lockForChange()
	if h.flags()&FlagExpired == 0 {
		h.SetFlags(FlagExpired)
		sh.counts.revoked++
		sh.unschedule(h)
		h.closeDone()
		switch {
		case h.flags()&FlagHeld == 0:
		case inOwnFence:
			h.SetFlags(FlagPassOnAfterFence)
		default:
			sh.giveBack(h, 0)
			sh.deferHook(h)
		}
	}
	sh.unlockAndRunDeferred()
}

// MoveDeadline sets a live holder's lease deadline and moves its timer, if it has one, with the
// shard mutex held.
func (h *Hold) MoveDeadline(deadline time.Duration) {
	h.deadline.Store(int64(deadline))
	if h.heapIdx >= 0 {
		h.shard().reschedule(h)
	}
}

// DeadErr is nil while h authorizes writes, else the error that says why not (ErrLeaseExpired or
// ErrReleased), with the shard mutex held.
func (h *Hold) DeadErr() error {
	f := h.flags()
	switch {
	case f&FlagExpired != 0:
		return ErrLeaseExpired
	case f&FlagReleased != 0:
		return ErrReleased
	case h.settle(h.shard()):
		return ErrLeaseExpired
	}
	return nil
}

// WaitedOn reports whether a request is queued for the key h holds or waits for.
func (h *Hold) WaitedOn() bool {
	sh := h.lockShard()
	defer sh.mu.Unlock()
	if h.flags()&FlagRange != 0 {
		if sp := sh.spaces[h.cf]; sp != nil && h.flags()&FlagHeld != 0 {
			n, _ := sp.rangeWaiters(h)
			return n > 0
		}
		return false
	}
	return h.e != nil && h.e.head != nil // the entry's wait queue: requests only, not holders
}
