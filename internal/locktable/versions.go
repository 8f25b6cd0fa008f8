package locktable

// Lock-ordered version stamps of a holder's writes (docs/DESIGN.md §9): the candidate is
// max(last issued + 1, or AcquiredAt if none issued; AcquiredAt; the candidate floor; a floor the
// caller gives). Joining a round restarts the count (JoinRound).

// VersionCandidate returns the candidate, at least floor, without recording it.
func (h *Claim) VersionCandidate(floor int64) int64 {
	sh := h.lockShard()
	defer sh.mu.Unlock()
	return h.candidate(floor)
}

// NextVersion returns the candidate and records it as issued.
func (h *Claim) NextVersion() int64 {
	sh := h.lockShard()
	defer sh.mu.Unlock()
	return h.nextVersion()
}

// RaiseVersionFloor raises the floor of later candidates to v, without counting as a write.
func (h *Claim) RaiseVersionFloor(v int64) {
	sh := h.lockShard()
	defer sh.mu.Unlock()
	g := h.ledgerPart()
	g.floor = max(g.floor, v)
}

// NoteVersion records v as issued if it is above the last issued version (or none was issued);
// it never lowers it.
func (h *Claim) NoteVersion(v int64) {
	sh := h.lockShard()
	defer sh.mu.Unlock()
	if g := h.ledgerPart(); h.flags()&flagHasVersion == 0 || v > g.lastVer {
		g.lastVer = v
		h.setFlags(flagHasVersion)
	}
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
