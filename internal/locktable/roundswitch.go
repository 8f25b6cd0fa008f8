package locktable

import "time"

// Switching a live claim from its joined round to another round of the same record, and back:
// a Txn that upgrades a cluster share gets an exclusive round that replaces the shared one. The
// table does the swap because only under the shard mutex is it certain which of the two release
// hooks the claim fires when it ends and which one is the caller's to run.

// RoundSwitch is what SwitchRound replaced, to put back with Revert or let go with Replaced.
type RoundSwitch struct {
	h    *Claim
	hook func() error // the replaced round's release
	// The replaced round's token and caps, and the lease's deadline and ExpiresAt before the
	// switch moved the deadline earlier, to movedTo (0 when it did not move it).
	token          uint64
	roundEnd       time.Duration
	roundExpiresAt int64
	deadline       time.Duration
	expiresAt      int64
	movedTo        time.Duration
}

// SwitchRound moves h, a live claim under a joined round, to r, a round of the same record
// granted while h held it. The fencing token and the release hook become r's; when r ends
// (MintedMono+Lease) before the round h joined, the round's deadline and ExpiresAt move earlier
// to it, and so does the lease when it ends later than r: a switch never makes a lease longer.
// AcquiredAt, TsR, the versions issued and the lease asked for stay. It returns false, changing
// nothing, if h no longer authorizes writes, has no joined round, or r's lease is already over.
// On success the replaced round's release is no longer h's: the caller runs it (Replaced) or puts
// it back (Revert).
func (h *Claim) SwitchRound(r Round) (RoundSwitch, bool) {
	sh := h.lockShard()
	defer sh.unlockAndRunDeferred()
	if h.dead() || h.settle(sh) || h.flags()&flagCluster == 0 {
		return RoundSwitch{}, false
	}
	end := MonoAfter(r.MintedMono, r.Lease)
	if end <= h.ten.clock.Mono() {
		return RoundSwitch{}, false
	}
	g := h.ledgerPart()
	s := RoundSwitch{h: h, hook: h.cold.hook, token: g.token, roundEnd: g.roundEnd,
		roundExpiresAt: g.roundExpiresAt, deadline: h.dueAt(), expiresAt: h.expiresAt}
	g.token = r.Token
	h.cold.hook = r.Hook
	if end < g.roundEnd {
		g.roundExpiresAt -= int64(g.roundEnd - end)
		g.roundEnd = end
	}
	if end < s.deadline {
		s.movedTo = end
		h.expiresAt -= int64(s.deadline - end)
		h.moveDeadline(end)
	}
	sh.watch(h) // the release hook must fire at the deadline
	return s, true
}

// Replaced returns the release of the round SwitchRound replaced, for a caller that keeps the
// switch to run once the new round is in place.
func (s RoundSwitch) Replaced() func() error { return s.hook }

// Revert puts back the round SwitchRound replaced, its token, caps and release hook, if the claim
// still authorizes writes, and the lease's deadline and ExpiresAt where the switch left them. It returns the release that is
// then no claim's, for the caller to run: the switched-in round's when the claim was put back,
// else the replaced one's (the ended claim fires, or has fired, the switched-in one). The zero
// RoundSwitch returns nil.
func (s RoundSwitch) Revert() func() error {
	h := s.h
	if h == nil {
		return nil
	}
	sh := h.lockShard()
	defer sh.unlockAndRunDeferred()
	if h.dead() || h.settle(sh) {
		return s.hook
	}
	g := h.ledgerPart()
	orphan := h.cold.hook
	g.token = s.token
	g.roundEnd, g.roundExpiresAt = s.roundEnd, s.roundExpiresAt
	h.cold.hook = s.hook
	if s.movedTo != 0 && h.dueAt() == s.movedTo { // not moved since, as by a Renew
		h.expiresAt = s.expiresAt
		h.moveDeadline(s.deadline)
	}
	return orphan
}
