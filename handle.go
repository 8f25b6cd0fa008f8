package recordlock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Handle is one holder's authority over one key, bounded by a lease that runs on the monotonic
// clock of the Locker that issued it. Its methods are safe for concurrent use.
//
// A Handle stops authorizing writes when it is released, when its lease lapses, or when it is
// revoked; Done is closed at that moment. See the package documentation for the difference
// between IsExpired and IsLeaseExpired.
type Handle struct {
	l *Locker
	// e is the table entry of its key while it holds or waits for it. It and every field below
	// are guarded by the shard mutex.
	e      *keyEntry
	key    []byte
	keyBuf [24]byte // short keys live here, so a Lock allocates only the Handle
	hash   uint64
	cf     uint32 // column family ID: a record is (cf, key)
	owner  *Txn   // the Txn that took it, until that Txn ends; nil outside a Txn

	state   atomic.Uint32 // handleFlags; written under the shard mutex, read without it
	heapIdx int32         // position in its scheduler's heap, -1 when not scheduled; beside state so neither is padded
	// deadline is the Mono of l.clock at which the lease lapses; while the Lock that made the
	// handle waits, it is when that wait times out. The scheduler's heap is ordered by it.
	deadline atomic.Int64

	expiresAt  int64 // wall Unix nanoseconds, informational
	acquiredAt Timestamp
	w          *waiter // set while the Lock that made it waits
	cold       *handleCold

	fenceMu sync.Mutex // held for the whole of Fence; Release and RevokeLease wait on it
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

const (
	flagHeld             handleFlags = 1 << iota // the table's holder of the key
	flagReleased                                 // the key was given back (deliberately or by expiry)
	flagExpired                                  // the lease lapsed or was revoked
	flagFencing                                  // inside Fence
	flagPassOnAfterFence                         // expired inside Fence: pass the key on when it returns
	flagHold                                     // Options.Hold, or upgraded
	flagCluster                                  // joined a cluster round
	flagHasVersion                               // lastVer was issued or noted
)

// closedChan is what Done returns for a handle that is already dead.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (h *Handle) flags() handleFlags { return h.state.Load() }

// dueAt is when the scheduler must look at h: its lease end, or its wait's timeout.
func (h *Handle) dueAt() time.Duration { return time.Duration(h.deadline.Load()) }

// setFlags and clearFlags are called with the shard mutex held, so a plain load and store suffice.
func (h *Handle) setFlags(f handleFlags)   { h.state.Store(h.state.Load() | f) }
func (h *Handle) clearFlags(f handleFlags) { h.state.Store(h.state.Load() &^ f) }

func (h *Handle) shard() *shard { return h.l.tab.shard(h.hash) }

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

// settle completes an expiry whose deadline passed before any timer ran. Called with the shard
// mutex held; it reports whether the lease has ended (lapsed or revoked).
func (h *Handle) settle(sh *shard) bool {
	if h.flags()&flagExpired != 0 {
		return true
	}
	return h.settleAt(sh, h.l.clock.Mono())
}

// settleAt is settle with the clock already read: now is a Mono of h's clock taken by the caller.
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

// Key returns the locked key. The caller must not modify it.
func (h *Handle) Key() []byte { return h.key }

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
	if h.flags()&(flagReleased|flagExpired) != 0 || h.settle(sh) {
		return closedChan
	}
	c := h.getCold()
	if c.done == nil {
		c.done = make(chan struct{})
	}
	return c.done
}

// IsExpired reports whether the handle can no longer authorize a new write, evaluated now:
// released, revoked, or past its deadline. Finding the deadline passed, it completes the expiry
// (gives the key back and fires the release hook) before it returns true.
func (h *Handle) IsExpired() bool {
	if h.flags()&(flagReleased|flagExpired) != 0 {
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

// lockForChange takes the shard mutex for Release or RevokeLease, first waiting for a Fence
// running in another goroutine to return, whatever the handle's state: a lease that lapsed inside
// Fence still has its commit in flight (SPEC §5.7). It reports whether it had to wait.
func (h *Handle) lockForChange(sh *shard) (waited bool) {
	for {
		sh.mu.Lock()
		if h.flags()&flagFencing == 0 {
			return waited
		}
		sh.mu.Unlock()
		h.fenceMu.Lock()
		//lint:ignore SA2001 the empty critical section is the point: it waits for Fence to return
		h.fenceMu.Unlock()
		waited = true
	}
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
	ok := h.flags()&(flagReleased|flagExpired) == 0 && !h.settleAt(sh, now)
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
		h.setFlags(flagExpired | flagReleased)
		sh.unschedule(h)
		h.closeDone()
		if h.flags()&flagHeld != 0 {
			sh.giveBack(h, 0)
			sh.queueHook(h)
		}
	}
	sh.unlockAndRunHooks()
}

// JoinClusterRound re-anchors the handle to a granted cluster round. It returns false, changing
// nothing, if the handle no longer authorizes writes or the round's lease, measured from
// mintedMono on this handle's clock, is already over. Otherwise AcquiredAt and ClusterTsR become
// tsR, the version counter restarts, the deadline becomes exactly mintedMono+lease, ExpiresAt
// becomes tsR+lease, and onRelease becomes the release hook.
func (h *Handle) JoinClusterRound(tsR Timestamp, lease time.Duration, mintedMono time.Duration, onRelease func() error) bool {
	return h.join(Round{TsR: tsR, MintedMono: mintedMono, Release: onRelease}, lease)
}

// join is JoinClusterRound that also records the round's fencing token.
func (h *Handle) join(round Round, lease time.Duration) bool {
	sh := h.shard()
	sh.mu.Lock()
	defer sh.unlockAndRunHooks()
	if h.flags()&(flagReleased|flagExpired) != 0 || h.settle(sh) {
		return false
	}
	now := h.l.clock.Mono()
	if lease-(now-round.MintedMono) <= 0 {
		return false
	}
	c := h.getCold()
	c.tsR, c.hasTsR, c.token = round.TsR, true, round.Token
	c.roundEnd = round.MintedMono + lease
	c.roundExpiresAt = int64(round.TsR) + int64(lease)
	c.hook = round.Release
	h.acquiredAt = round.TsR
	h.clearFlags(flagHasVersion)
	h.setFlags(flagCluster)
	h.expiresAt = c.roundExpiresAt
	h.moveDeadline(sh, round.MintedMono+lease, now)
	return true
}

// holdThrough moves a live holder's deadline to deadline, for the Locker to keep the local key
// while a cluster round is requested. It reports false, changing nothing, when h is dead.
func (h *Handle) holdThrough(deadline time.Duration) bool {
	sh := h.shard()
	sh.mu.Lock()
	defer sh.unlockAndRunHooks()
	if h.flags()&(flagReleased|flagExpired) != 0 || h.settle(sh) {
		return false
	}
	h.moveDeadline(sh, deadline, h.l.clock.Mono())
	return true
}

// moveDeadline sets a live holder's lease deadline and re-arms its schedule.
func (h *Handle) moveDeadline(sh *shard, deadline, now time.Duration) {
	h.deadline.Store(int64(deadline))
	s := sh.sched(h.l)
	s.remove(h)
	s.push(h, now)
}

// UpgradeToHold makes the lock outlive its Txn, with a new lease from now (0 means
// DefaultLease). Under a cluster round the new deadline is clamped to the round's: a granted
// round is never extended locally. It then advances the version counter once. It returns an
// *OptionError for an invalid lease, and ErrReleased or ErrLeaseExpired for a dead handle; on
// failure nothing changes.
func (h *Handle) UpgradeToHold(lease time.Duration) error {
	lease, err := resolveDuration("Lease", lease, DefaultLease, MinLease, MaxLease)
	if err != nil {
		return err
	}
	sh := h.shard()
	sh.mu.Lock()
	defer sh.unlockAndRunHooks()
	if err := h.deadErr(sh); err != nil {
		return err
	}
	wall, now := readClock(h.l.clock)
	deadline := now + lease
	if c := h.cold; h.flags()&flagCluster != 0 && c.roundEnd <= deadline {
		// Clamped to the round: its deadline and its ExpiresAt, wall(tsR)+lease (SPEC §5.1),
		// even after an earlier upgrade had shortened both.
		deadline, h.expiresAt = c.roundEnd, c.roundExpiresAt
	} else {
		h.expiresAt = wall + int64(lease)
	}
	h.setFlags(flagHold)
	h.moveDeadline(sh, deadline, now)
	h.nextVersion()
	return nil
}

// Renew extends the lease: the new deadline is now plus lease (0 means DefaultLease). Unlike
// UpgradeToHold it leaves Hold and the version counter alone, so a lock of a Txn still ends with
// the Txn. Under a cluster round the new deadline is clamped to the round's, as in UpgradeToHold.
// It returns an *OptionError for an invalid lease, and ErrReleased or ErrLeaseExpired for a dead
// handle; on failure nothing changes.
func (h *Handle) Renew(lease time.Duration) error {
	lease, err := resolveDuration("Lease", lease, DefaultLease, MinLease, MaxLease)
	if err != nil {
		return err
	}
	sh := h.shard()
	sh.mu.Lock()
	defer sh.unlockAndRunHooks()
	if err := h.deadErr(sh); err != nil {
		return err
	}
	wall, now := readClock(h.l.clock)
	deadline := now + lease
	if c := h.cold; h.flags()&flagCluster != 0 && c.roundEnd <= deadline {
		deadline, h.expiresAt = c.roundEnd, c.roundExpiresAt
	} else {
		h.expiresAt = wall + int64(lease)
	}
	h.moveDeadline(sh, deadline, now)
	return nil
}

// deadErr is nil while h authorizes writes, else the error that says why not.
func (h *Handle) deadErr(sh *shard) error {
	f := h.flags()
	switch {
	case f&flagExpired != 0:
		return ErrLeaseExpired
	case f&flagReleased != 0:
		return ErrReleased
	case h.settle(sh):
		return ErrLeaseExpired
	}
	return nil
}

// HolderVersionCandidate returns the version the next holder write would get, at least floor,
// without recording it: max(last issued + 1, or AcquiredAt if none; AcquiredAt; the candidate
// floor; floor).
func (h *Handle) HolderVersionCandidate(floor Timestamp) Timestamp {
	sh := h.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return h.candidate(floor)
}

func (h *Handle) candidate(floor Timestamp) Timestamp {
	v := max(h.acquiredAt, floor)
	if c := h.cold; c != nil {
		v = max(v, c.floor)
		if h.flags()&flagHasVersion != 0 {
			v = max(v, c.lastVer+1)
		}
	}
	return v
}

// NextHolderVersion returns the candidate version and records it as issued.
func (h *Handle) NextHolderVersion() Timestamp {
	sh := h.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return h.nextVersion()
}

func (h *Handle) nextVersion() Timestamp {
	v := h.candidate(0)
	h.getCold().lastVer = v
	h.setFlags(flagHasVersion)
	return v
}

// NoteCandidateFloor raises the floor of later candidates without counting as a write.
func (h *Handle) NoteCandidateFloor(v Timestamp) {
	sh := h.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c := h.getCold()
	c.floor = max(c.floor, v)
}

// NoteHolderVersion records v as issued if it is above the last issued version; it never lowers it.
func (h *Handle) NoteHolderVersion(v Timestamp) {
	sh := h.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c := h.getCold(); h.flags()&flagHasVersion == 0 || v > c.lastVer {
		c.lastVer = v
		h.setFlags(flagHasVersion)
	}
}

// Fence runs commit only while the lease is live and keeps the key from passing to another
// holder until commit returns. It returns ErrLeaseExpired without calling commit when
// IsLeaseExpired is true, and otherwise commit's error. If the lease ends while commit runs, Done
// closes at once and the key passes on when commit returns. commit may call the handle's
// accessors and predicates; it must not call Release, RevokeLease or Fence on the same handle.
// Fence after Release still runs while the lease lasts, but then a successor may hold the key.
func (h *Handle) Fence(commit func() error) error { return h.fence(commit, false) }

// fenceThenRelease is Fence followed, unless the lock is held (Hold), by Release in the critical
// section that ends the fence: one mutex round trip and two clock reads fewer than the two calls,
// for Txn.Commit, whose locks without Hold end with it.
func (h *Handle) fenceThenRelease(commit func() error) error { return h.fence(commit, true) }

// fence is Fence; with releaseUnlessHold it is fenceThenRelease.
func (h *Handle) fence(commit func() error, releaseUnlessHold bool) error {
	sh := h.shard()
	h.fenceMu.Lock()
	sh.mu.Lock()
	if h.flags()&flagExpired != 0 || h.settle(sh) {
		hooks := sh.drainHooks()
		sh.mu.Unlock()
		h.fenceMu.Unlock()
		runHooks(hooks)
		return ErrLeaseExpired
	}
	h.setFlags(flagFencing)
	sh.mu.Unlock()
	// The release hook of a lease that ended inside Fence runs after fenceMu is released, so a
	// slow hook does not hold up Release or RevokeLease callers waiting for the commit.
	defer func() {
		hooks := h.endFence(sh, releaseUnlessHold)
		h.fenceMu.Unlock()
		runHooks(hooks)
	}()
	return commit()
}

// endFence leaves Fence, passing the key on if the lease ended while commit ran, or else
// releasing a lock without Hold if asked to. It returns the release hook to run once the caller
// has let go of fenceMu.
func (h *Handle) endFence(sh *shard, releaseUnlessHold bool) []pendingHook {
	sh.mu.Lock()
	h.clearFlags(flagFencing)
	switch f := h.flags(); {
	case f&flagPassOnAfterFence != 0:
		h.clearFlags(flagPassOnAfterFence)
		sh.giveBack(h, 0)
		sh.queueHook(h)
	case releaseUnlessHold && f&(flagReleased|flagExpired|flagHold) == 0:
		// No clock read: lapsed while commit ran or not, the key goes back now and the hook
		// fires once, and from the deadline on both predicates read the lapse off the deadline.
		h.releaseLocked(sh)
	case f&flagExpired == 0:
		h.settle(sh) // a lease that lapsed while commit ran, before any timer saw it
	}
	hooks := sh.drainHooks()
	sh.mu.Unlock()
	return hooks
}
