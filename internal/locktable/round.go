package locktable

import "time"

// Moving a live lease's deadline: joining a cluster round, keeping the key through a round
// request, and extending or renewing the lease, with the undo of an extension. A joined round
// caps every later extension: a granted round is never extended locally.

// Round is a cluster round a claim joins (JoinRound).
type Round struct {
	TsR        int64         // the round's timestamp: the claim's AcquiredAt from now on
	Token      uint64        // its fencing token, 0 for none
	MintedMono time.Duration // the Mono of the claim's clock read before the round was requested
	Lease      time.Duration // measured from MintedMono
	Hook       func() error  // the claim's release hook from now on (the round's release)
	// Coordinated is true for a round of the database's Coordinator, false for one its caller
	// joined by hand (Snapshot.Coordinated).
	Coordinated bool
}

// JoinRound re-anchors h to a granted round. It returns false, changing nothing, if h no longer
// authorizes writes, if the round's lease is already over, or if it is longer than the lease h
// asked for (askedLease): a round never grants more than the lock asked for. Otherwise
// AcquiredAt becomes the round's TsR, the version counter restarts, the deadline becomes exactly
// MintedMono+Lease, ExpiresAt becomes TsR+Lease, and the round's hook becomes the release hook,
// armed to fire at the round's deadline.
func (h *Claim) JoinRound(r Round) bool {
	sh := h.lockShard()
	defer sh.unlockAndRunDeferred()
	if h.dead() || h.settle(sh) || r.Lease > h.askedLease() {
		return false
	}
	end := MonoAfter(r.MintedMono, r.Lease)
	if end <= h.ten.clock.Mono() {
		return false
	}
	g := h.ledgerPart()
	g.tsR, g.hasTsR, g.coordinated, g.token = r.TsR, true, r.Coordinated, r.Token
	g.roundEnd = end
	g.roundExpiresAt = r.TsR + int64(r.Lease)
	h.cold.hook = r.Hook
	h.acquiredAt = r.TsR
	h.clearFlags(flagHasVersion)
	h.setFlags(flagCluster)
	h.expiresAt = g.roundExpiresAt
	h.moveDeadline(end)
	sh.watch(h) // the release hook must fire at the round's deadline
	return true
}

// AwaitRound moves a live holder's deadline to deadline, to keep the key while a cluster round is
// requested. It reports false, changing nothing, when h is dead.
func (h *Claim) AwaitRound(deadline time.Duration) bool {
	sh := h.lockShard()
	defer sh.unlockAndRunDeferred()
	if h.dead() || h.settle(sh) {
		return false
	}
	h.moveDeadline(deadline)
	return true
}

// Extend sets h's lease to run lease (at most MaxAskedLease) from now, which may shorten it, and
// records lease as the lease asked for. Under a joined round the deadline is clamped to the
// round's, and ExpiresAt with it. With outlive, h also outlives its owner from now on (flagHold)
// and issues one version (as NextVersion does). It returns ErrReleased or ErrLeaseExpired for a
// dead claim, changing nothing; else an Undo that puts back what it changed.
func (h *Claim) Extend(lease time.Duration, outlive bool) (Undo, error) {
	sh := h.lockShard()
	defer sh.unlockAndRunDeferred()
	if err := h.deadErr(); err != nil {
		return Undo{}, err
	}
	u := Undo{h: h, deadline: h.dueAt(), expiresAt: h.expiresAt, asked: h.askedLease(),
		flags: h.flags() & (flagHold | flagHasVersion)}
	g := h.ledgerIfAny()
	if g != nil {
		u.lastVer = g.lastVer
	}
	wall, now := ReadClock(h.ten.clock)
	deadline := MonoAfter(now, lease)
	if h.flags()&flagCluster != 0 && g.roundEnd <= deadline {
		// Clamped to the round: its deadline and its ExpiresAt, TsR+Lease, even after an earlier
		// extension had shortened both.
		deadline = g.roundEnd
		h.expiresAt = g.roundExpiresAt
	} else {
		h.expiresAt = wall + int64(lease)
	}
	h.moveDeadline(deadline)
	h.setAskedLease(lease)
	if outlive {
		h.setFlags(flagHold)
		h.nextVersion()
	}
	return u, nil
}

// Undo puts back what an Extend or an Upgrade changed, for a caller whose larger step failed.
// The zero Undo does nothing.
type Undo struct {
	h       *Claim
	upgrade bool // an Upgrade's: make the claim shared again
	// An Extend's: what it replaced.
	deadline  time.Duration
	asked     time.Duration
	expiresAt int64
	lastVer   int64
	flags     uint32 // flagHold and flagHasVersion as they were
}

// Undo puts back the lease (and the lease asked for), ExpiresAt, flagHold and version counter
// that Extend replaced: a deadline put back that has already passed ends the lease now, as it
// would have without the extension. A lease that has ended since Extend keeps its deadline and
// ExpiresAt: it stays ended. Or it makes the claim an Upgrade made exclusive shared again;
// if it still holds its key, the shared requests at the head of the queue join it.
func (u Undo) Undo() {
	h := u.h
	switch {
	case h == nil:
		return
	case u.upgrade:
		h.downgrade()
		return
	}
	sh := h.lockShard()
	// A lease that ended since, at the deadline Extend set or by a revocation, stays ended:
	// putting back a later deadline would revive it, even after a release.
	ended := h.settle(sh)
	h.setAskedLease(u.asked)
	h.replaceFlags(flagHold|flagHasVersion, u.flags)
	if g := h.ledgerIfAny(); g != nil {
		g.lastVer = u.lastVer
	}
	if !ended {
		h.expiresAt = u.expiresAt
		h.moveDeadline(u.deadline)
		if h.flags()&flagHeld != 0 {
			h.settle(sh)
		}
	}
	sh.unlockAndRunDeferred()
}
