package recordlock

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Handle is one holder's authority over one key, bounded by a lease that runs on the monotonic
// clock of the Locker that issued it. Its methods are safe for concurrent use.
//
// A Handle stops authorizing writes when it is released, when its lease lapses, or when it is
// revoked; Done is closed at that moment. See the package documentation for the difference
// between IsExpired and IsLeaseExpired.
type Handle struct {
	// Set when the handle is made, never changed: read without a lock. The key is a pointer and a
	// length rather than a slice, which keeps a Handle within 128 bytes (see key).
	l      *Locker
	keyPtr *byte
	keyLen int32
	// heapIdx is guarded by the shard mutex; it sits here to share a word with keyLen.
	heapIdx int32    // position in its scheduler's heap, -1 when not scheduled
	keyBuf  [19]byte // short keys live here, so a Lock allocates only the Handle
	// leaseHi and leaseLo are guarded by the shard mutex; they share a word with keyBuf (see
	// askedLease).
	leaseHi uint8
	leaseLo uint32
	hash    uint64
	cf      uint32 // column family ID: a record is (cf, key)

	// Written under the shard mutex, read without it.
	state atomic.Uint32 // handleFlags
	// deadline is the Mono of l.clock at which the lease lapses; while the Lock that made the
	// handle waits, it is when that wait times out. The scheduler's heap is ordered by it.
	deadline atomic.Int64

	// Guarded by the shard mutex.
	e          *keyEntry // the table entry of its key while it holds or waits for it
	owner      *Txn      // the Txn that took it, until that Txn ends; nil outside a Txn
	expiresAt  int64     // wall Unix nanoseconds, informational
	acquiredAt Timestamp
	w          *waiter // set while the Lock that made it waits
	cold       *handleCold

	// Held for the whole of Fence; Release, RevokeLease and Close wait on it. Not the shard
	// mutex: a commit runs under it while the shard serves other keys.
	fenceMu sync.Mutex
}

// handleCold is what most handles never need, allocated on first use (under the shard mutex;
// once set, the pointer never changes). Keeping it out of Handle keeps the one allocation of an
// uncontended Lock small.
type handleCold struct {
	done   chan struct{}
	hook   func() error
	tsR    Timestamp
	hasTsR bool
	// roundEnd and roundExpiresAt are the joined round's deadline and ExpiresAt, the cap of
	// UpgradeToHold; an earlier upgrade may have left the current ones below them.
	roundEnd       time.Duration
	roundExpiresAt int64
	token          uint64
	lastVer        Timestamp // valid with flagHasVersion
	floor          Timestamp // the candidate floor of NoteCandidateFloor
}

type handleFlags = uint32

// A handle is dead, and authorizes no new write, once it is released or expired (dead). The key
// goes back to the table when it dies, except that a lease ending inside Fence keeps the key until
// the commit returns (flagPassOnAfterFence).
const (
	flagHeld             handleFlags = 1 << iota // the table's holder of the key
	flagReleased                                 // given back deliberately: Release or Close
	flagExpired                                  // the lease ended: lapsed or revoked
	flagFencing                                  // inside Fence
	flagPassOnAfterFence                         // expired inside Fence: pass the key on when it returns
	flagHold                                     // Options.Hold, or upgraded
	flagCluster                                  // joined a cluster round
	flagHasVersion                               // lastVer was issued or noted
	flagShared                                   // a shared lock (Options.Shared), until upgraded
)

// closedChan is what Done returns for a handle that is already dead.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (h *Handle) flags() handleFlags { return h.state.Load() }

// dead reports whether the handle was released or its lease ended, as far as its flags know: a
// lapse that nothing has settled yet is not in them.
func (h *Handle) dead() bool { return h.flags()&(flagReleased|flagExpired) != 0 }

// released reports whether the handle was given back deliberately: by a Release that returned
// true, or by Close, which releases the same way. A lease that ended first leaves it false.
func (h *Handle) released() bool { return h.flags()&flagReleased != 0 }

// monoFor returns the Mono of h's clock, given mono, a reading of c's clock: the same reading
// when both Lockers run on one clock.
func (h *Handle) monoFor(c *tenant, mono time.Duration) time.Duration {
	if h.l.clockID == c.clockID {
		return mono
	}
	return h.l.clock.Mono()
}

// dueAt is when the scheduler must look at h: its lease end, or its wait's timeout.
func (h *Handle) dueAt() time.Duration { return time.Duration(h.deadline.Load()) }

// setFlags and clearFlags are called with the shard mutex held, so a plain load and store suffice.
func (h *Handle) setFlags(f handleFlags)   { h.state.Store(h.state.Load() | f) }
func (h *Handle) clearFlags(f handleFlags) { h.state.Store(h.state.Load() &^ f) }

func (h *Handle) shard() *shard { return h.l.tab.shard(h.hash) }

// tenant is all the key-lock table sees of the Locker that issued h.
func (h *Handle) tenant() *tenant { return &h.l.tenant }

func (h *Handle) getCold() *handleCold {
	if h.cold == nil {
		h.cold = &handleCold{}
	}
	return h.cold
}

func (h *Handle) closeDone() {
	if h.cold != nil && h.cold.done != nil {
		close(h.cold.done)
		h.cold.done = nil
	}
}

// lapsed reports whether the lease deadline has passed, by h's own clock.
func (h *Handle) lapsed() bool { return h.lapsedAt(h.l.clock.Mono()) }

// lapsedAt reports whether the lease deadline is not after now, a Mono of h's clock.
func (h *Handle) lapsedAt(now time.Duration) bool { return now >= time.Duration(h.deadline.Load()) }

// Settling. A lease lapses at its deadline whether or not its timer has run: the timer may be
// late, or the handle may be off every heap. Whoever looks at a handle under the shard mutex and
// finds its deadline passed completes the expiry then and there (the key goes back, Done closes,
// the release hook is queued), so every observer agrees with the deadline. settle, settleAt and
// settleFor do that; settleNow takes the mutex to do it.

// settle settles h on a fresh reading of its clock, with the shard mutex held. It reports
// whether the lease has ended (lapsed or revoked).
func (h *Handle) settle(sh *shard) bool {
	if h.flags()&flagExpired != 0 {
		return true
	}
	return h.settleAt(sh, h.l.clock.Mono())
}

// settleAt is settle with the clock already read: now is a Mono of h's clock.
func (h *Handle) settleAt(sh *shard, now time.Duration) bool {
	if h.flags()&flagExpired != 0 {
		return true
	}
	if h.lapsedAt(now) {
		sh.expire(h)
		return true
	}
	return false
}

// settleFor settles h, the holder of a key that c's Lock found with mono, a reading of c's
// clock. It reports whether it ended the lease just now.
func (h *Handle) settleFor(sh *shard, c *tenant, mono time.Duration) bool {
	if h.flags()&flagExpired != 0 || !h.lapsedAt(h.monoFor(c, mono)) {
		return false
	}
	sh.expire(h)
	return true
}

// Key returns the locked key. The caller must not modify it.
func (h *Handle) Key() []byte { return h.key() }

// key is the handle's key: in keyBuf when it fits, else in a copy of its own.
func (h *Handle) key() []byte { return unsafe.Slice(h.keyPtr, h.keyLen) }

// setKey stores a copy of key, which must not be longer than maxKeyLen.
func (h *Handle) setKey(key []byte) {
	buf := h.keyBuf[:]
	if len(key) > len(buf) {
		buf = make([]byte, len(key))
	}
	copy(buf, key)
	h.keyPtr, h.keyLen = unsafe.SliceData(buf), int32(len(key))
}

// The lease a lock was taken, renewed or upgraded with, as asked (before any clamp to a round),
// bounds the rounds it may join (JoinClusterRound). It is kept exactly, in nanoseconds, in 40
// bits (leaseHi, leaseLo) taken from keyBuf's word: MaxLease needs 39, and a whole int64 would
// have cost keyBuf 8 bytes, and keys of 17 to 24 bytes a second allocation per Lock, to stay
// within 128 bytes. A coarser unit would fit in 32 bits but not hold every lease exactly: rounded
// down, a round of the lock's own lease would be refused; rounded up, a longer one accepted.

// Every valid lease fits 40 bits: this conversion does not compile otherwise.
const _ = uint8(MaxLease >> 32)

// askedLease returns the lease recorded by setAskedLease.
func (h *Handle) askedLease() time.Duration {
	return time.Duration(h.leaseHi)<<32 | time.Duration(h.leaseLo)
}

// setAskedLease records lease, a valid one, before h is published or with the shard mutex held.
func (h *Handle) setAskedLease(lease time.Duration) {
	h.leaseHi, h.leaseLo = uint8(lease>>32), uint32(lease)
}

// disown ends the handle's ownership by its Txn, when the Txn ends and the lock outlives it.
func (h *Handle) disown() {
	if h.owner == nil {
		return
	}
	sh := h.shard()
	sh.mu.Lock()
	h.owner = nil
	sh.mu.Unlock()
}

// ColumnFamilyID returns the ID of the locked key's column family; 0 is the default one.
func (h *Handle) ColumnFamilyID() uint32 { return h.cf }

// Scope returns the resolved scope: ScopeCluster once a cluster round was joined, else ScopeNode.
func (h *Handle) Scope() Scope {
	if h.flags()&flagCluster != 0 {
		return ScopeCluster
	}
	return ScopeNode
}

// Hold reports whether the lock outlives the Txn that took it.
func (h *Handle) Hold() bool { return h.flags()&flagHold != 0 }

// Shared reports whether the lock is shared (Options.Shared): other shared holders may hold the
// record at the same time. A handle a Txn upgraded to exclusive reports false.
func (h *Handle) Shared() bool { return h.flags()&flagShared != 0 }

// AcquiredAt is the timestamp minted when the key was taken, or the round's TsR under a round.
func (h *Handle) AcquiredAt() Timestamp {
	sh := h.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return h.acquiredAt
}

// ExpiresAt is the wall-clock time the lease ends, for display: enforcement uses the monotonic
// deadline, which a wall-clock step cannot move.
func (h *Handle) ExpiresAt() time.Time {
	sh := h.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return time.Unix(0, h.expiresAt)
}

// ClusterTsR returns the granted round's timestamp; false while the handle is node-scoped.
func (h *Handle) ClusterTsR() (Timestamp, bool) {
	sh := h.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if h.cold == nil || !h.cold.hasTsR {
		return 0, false
	}
	return h.cold.tsR, true
}

// Token returns the round's fencing token: 0 when node-scoped or when the coordinator has none.
func (h *Handle) Token() uint64 {
	sh := h.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if h.cold == nil {
		return 0
	}
	return h.cold.token
}

// Done returns a channel that is closed as soon as the handle stops authorizing writes: release,
// lease lapse or revocation. A closed Done does not yet mean the key is free when the lease ended
// inside Fence: the key passes on when the commit returns.
func (h *Handle) Done() <-chan struct{} {
	sh := h.shard()
	sh.mu.Lock()
	defer sh.unlockAndRunHooks()
	if h.dead() || h.settle(sh) {
		return closedChan
	}
	c := h.getCold()
	if c.done == nil {
		c.done = make(chan struct{})
		sh.watch(h) // the channel must close at the deadline
	}
	return c.done
}

// IsExpired reports whether the handle can no longer authorize a new write, evaluated now:
// released, revoked, or past its deadline. Finding the deadline passed, it completes the expiry
// (gives the key back and fires the release hook) before it returns true.
func (h *Handle) IsExpired() bool {
	if h.dead() {
		return true
	}
	if !h.lapsed() {
		return false
	}
	h.settleNow()
	return true
}

// IsLeaseExpired reports whether the lease has ended, by lapse or revocation. A deliberate
// Release alone does not make it true, so a write staged before Release stays valid until the
// deadline; once the deadline passes it is true for good.
func (h *Handle) IsLeaseExpired() bool {
	if h.flags()&flagExpired != 0 {
		return true
	}
	if !h.lapsed() {
		return false
	}
	h.settleNow()
	return true
}

// settleNow takes the shard mutex to complete an expiry found lazily, then runs its hook.
func (h *Handle) settleNow() {
	sh := h.shard()
	sh.mu.Lock()
	if h.flags()&flagReleased == 0 {
		h.settle(sh)
	}
	sh.unlockAndRunHooks()
}

// Release gives the key back. It returns true the first time; false when the handle was already
// released, expired or revoked, or is past its deadline (it then completes the expiry). If another
// goroutine is inside Fence on this handle, Release waits for its commit to return.
func (h *Handle) Release() bool {
	sh := h.shard()
	// The clock is read before the mutex, which keeps the read out of the critical section that
	// every Lock and Release of the shard's keys queues behind. Release takes effect at that
	// reading: an expiry anyone observed since then was settled under the mutex and is seen below.
	// Waiting out a Fence can take long, so the clock is read again after one.
	now := h.l.clock.Mono()
	if h.lockForChange(sh) {
		now = h.l.clock.Mono()
	}
	ok := !h.dead() && !h.settleAt(sh, now)
	if ok {
		h.releaseLocked(sh)
	}
	sh.unlockAndRunHooks()
	return ok
}

// releaseLocked gives back the key of a live holder, with the shard mutex held.
func (h *Handle) releaseLocked(sh *shard) {
	sh.unschedule(h)
	sh.giveBack(h, flagReleased)
	h.closeDone() // after the flag: a reader woken by Done finds the handle released
	sh.queueHook(h)
}

// RevokeLease ends the handle's authority ahead of its lease, so IsLeaseExpired becomes true and
// a write staged through it is fenced. If the key is still held it is given back and the release
// hook fires; after a Release it only settles the flag. It waits for a Fence running in another
// goroutine, so once it returns no fenced write through this handle is in flight. Idempotent.
func (h *Handle) RevokeLease() {
	sh := h.shard()
	h.lockForChange(sh)
	if h.flags()&flagExpired == 0 {
		h.setFlags(flagExpired)
		sh.counts.revoked++
		sh.unschedule(h)
		h.closeDone()
		if h.flags()&flagHeld != 0 {
			sh.giveBack(h, 0)
			sh.queueHook(h)
		}
	}
	sh.unlockAndRunHooks()
}
