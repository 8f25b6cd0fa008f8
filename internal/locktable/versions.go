package locktable

// Lock-ordered version stamps of a holder's writes (docs/DESIGN.md §9): the candidate is
// max(last issued + 1, or AcquiredAt if none issued; AcquiredAt; the candidate floor; a floor the
// caller gives). Joining a round restarts the count (JoinRound).

// StampOp is what Stamp does.
type StampOp uint8

const (
	// StampPeek returns the candidate, at least v, without recording it.
	StampPeek StampOp = iota
	// StampNext returns the candidate and records it as issued; v is ignored.
	StampNext
	// StampFloor raises the floor of later candidates to v, without counting as a write, and
	// returns v.
	StampFloor
	// StampNote records v as issued if it is above the last issued version (or none was issued);
	// it never lowers it. It returns v.
	StampNote
)

// Stamp reads or records a version stamp of h, as op says.
func (h *Claim) Stamp(op StampOp, v int64) int64 {
	sh := h.lockShard()
	defer sh.mu.Unlock()
	switch op {
	case StampPeek:
		return h.candidate(v)
	case StampNext:
		return h.nextVersion()
	case StampFloor:
		g := h.ledgerPart()
		g.floor = max(g.floor, v)
	case StampNote:
		if g := h.ledgerPart(); h.flags()&flagHasVersion == 0 || v > g.lastVer {
			g.lastVer = v
			h.setFlags(flagHasVersion)
		}
	}
	return v
}

// candidate is the version the next write would get, at least floor, with the shard mutex held.
func (h *Claim) candidate(floor int64) int64 {
	v := max(h.acquiredAt, floor)
	if g := h.ledgerIfAny(); g != nil {
		v = max(v, g.floor)
		if h.flags()&flagHasVersion != 0 {
			v = max(v, g.lastVer+1)
		}
	}
	return v
}

// nextVersion issues the candidate, with the shard mutex held.
func (h *Claim) nextVersion() int64 {
	v := h.candidate(0)
	h.ledgerPart().lastVer = v
	h.setFlags(flagHasVersion)
	return v
}
