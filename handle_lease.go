package recordlock

import "time"

// Moving a live lease's deadline: joining a cluster round, holding the local key through a round
// request, UpgradeToHold and Renew.

// JoinClusterRound re-anchors the handle to a granted cluster round. It returns false, changing
// nothing, if the handle no longer authorizes writes, if the round's lease, measured from
// mintedMono on this handle's clock, is already over, or if lease is longer than the lease the
// handle was locked with (or last renewed or upgraded to, as asked, before any clamp): a round
// never grants more than the lock asked for. Otherwise AcquiredAt and ClusterTsR become
// tsR, the version counter restarts, the deadline becomes exactly mintedMono+lease, ExpiresAt
// becomes tsR+lease, and onRelease becomes the release hook. The Locker calls it for a lock of
// cluster scope; see Writing a coordinator in the package documentation.
func (h *Handle) JoinClusterRound(tsR Timestamp, lease time.Duration, mintedMono time.Duration, onRelease func() error) bool {
	return h.join(Round{TsR: tsR, MintedMono: mintedMono, Release: onRelease}, lease)
}

// join is JoinClusterRound that also records the round's fencing token.
func (h *Handle) join(round Round, lease time.Duration) bool {
	sh := h.shard()
	sh.mu.Lock()
	defer sh.unlockAndRunHooks()
	if h.dead() || h.settle(sh) || lease > h.askedLease() {
		return false
	}
	end := monoAfter(round.MintedMono, lease)
	if end <= h.l.clock.Mono() {
		return false
	}
	c := h.getCold()
	c.tsR, c.hasTsR, c.token = round.TsR, true, round.Token
	c.roundEnd = end
	c.roundExpiresAt = int64(round.TsR) + int64(lease)
	c.hook = round.Release
	h.acquiredAt = round.TsR
	h.clearFlags(flagHasVersion)
	h.setFlags(flagCluster)
	h.expiresAt = c.roundExpiresAt
	h.moveDeadline(sh, c.roundEnd)
	sh.watch(h) // the release hook must fire at the round's deadline
	return true
}

// holdThrough moves a live holder's deadline to deadline, for the Locker to keep the local key
// while a cluster round is requested. It reports false, changing nothing, when h is dead.
func (h *Handle) holdThrough(deadline time.Duration) bool {
	sh := h.shard()
	sh.mu.Lock()
	defer sh.unlockAndRunHooks()
	if h.dead() || h.settle(sh) {
		return false
	}
	h.moveDeadline(sh, deadline)
	return true
}

// moveDeadline sets a live holder's lease deadline and moves its timer, if it has one.
func (h *Handle) moveDeadline(sh *shard, deadline time.Duration) {
	h.deadline.Store(int64(deadline))
	if h.heapIdx >= 0 {
		sh.reschedule(h)
	}
}

// UpgradeToHold makes the lock outlive its Txn, with a new lease from now (0 means
// DefaultLease). Under a cluster round the new deadline is clamped to the round's: a granted
// round is never extended locally. It then advances the version counter once. It returns an
// *OptionError for an invalid lease, and ErrReleased or ErrLeaseExpired for a dead handle; on
// failure nothing changes.
func (h *Handle) UpgradeToHold(lease time.Duration) error {
	_, err := h.extend(lease, true)
	return err
}

// Renew extends the lease: the new deadline is now plus lease (0 means DefaultLease). Unlike
// UpgradeToHold it leaves Hold and the version counter alone, so a lock of a Txn still ends with
// the Txn. Under a cluster round the new deadline is clamped to the round's, as in UpgradeToHold.
// It returns an *OptionError for an invalid lease, and ErrReleased or ErrLeaseExpired for a dead
// handle; on failure nothing changes.
func (h *Handle) Renew(lease time.Duration) error {
	_, err := h.extend(lease, false)
	return err
}

// leaseState is what extend changes on a handle, kept so that a LockAll that fails can undo
// the upgrades it made (undo).
type leaseState struct {
	h         *Handle
	deadline  time.Duration
	expiresAt int64
	asked     time.Duration // askedLease
	flags     handleFlags   // flagHold and flagHasVersion as they were
	lastVer   Timestamp
}

// extend is Renew, and with hold UpgradeToHold. On success it returns the state it replaced.
func (h *Handle) extend(lease time.Duration, hold bool) (leaseState, error) {
	lease, err := resolveDuration("Lease", lease, DefaultLease, MinLease, MaxLease)
	if err != nil {
		return leaseState{}, err
	}
	sh := h.shard()
	sh.mu.Lock()
	defer sh.unlockAndRunHooks()
	if err := h.deadErr(sh); err != nil {
		return leaseState{}, err
	}
	was := leaseState{h: h, deadline: h.dueAt(), expiresAt: h.expiresAt, asked: h.askedLease(), flags: h.flags() & (flagHold | flagHasVersion)}
	if h.cold != nil {
		was.lastVer = h.cold.lastVer
	}
	wall, now := readClock(h.l.clock)
	deadline := monoAfter(now, lease)
	if c := h.cold; h.flags()&flagCluster != 0 && c.roundEnd <= deadline {
		// Clamped to the round: its deadline and its ExpiresAt, wall(tsR)+lease, even after an
		// earlier upgrade or renewal had shortened both.
		deadline, h.expiresAt = c.roundEnd, c.roundExpiresAt
	} else {
		h.expiresAt = wall + int64(lease)
	}
	h.moveDeadline(sh, deadline)
	h.setAskedLease(lease)
	if hold {
		h.setFlags(flagHold)
		h.nextVersion()
	}
	return was, nil
}

// undo puts back the lease (and the lease asked for), ExpiresAt, Hold flag and version counter
// that extend replaced. A deadline put back that has already passed ends the lease now, as it
// would have without the upgrade.
func (s leaseState) undo() {
	h := s.h
	sh := h.shard()
	sh.mu.Lock()
	h.expiresAt = s.expiresAt
	h.setAskedLease(s.asked)
	h.state.Store(h.flags()&^(flagHold|flagHasVersion) | s.flags)
	if h.cold != nil {
		h.cold.lastVer = s.lastVer
	}
	h.moveDeadline(sh, s.deadline)
	if h.flags()&flagHeld != 0 {
		h.settle(sh)
	}
	sh.unlockAndRunHooks()
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
