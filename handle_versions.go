package recordlock

// Lock-ordered version stamps of a holder's writes (docs/DESIGN.md §9), for databases that
// version their records: see Version stamps in the package documentation.

// HolderVersionCandidate returns the version the next holder write would get, at least floor,
// without recording it: max(last issued + 1, or AcquiredAt if none; AcquiredAt; the candidate
// floor; floor). See Version stamps in the package documentation.
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

// NextHolderVersion returns the candidate version and records it as issued. See Version stamps in
// the package documentation.
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

// NoteCandidateFloor raises the floor of later candidates without counting as a write. See
// Version stamps in the package documentation.
func (h *Handle) NoteCandidateFloor(v Timestamp) {
	sh := h.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c := h.getCold()
	c.floor = max(c.floor, v)
}

// NoteHolderVersion records v as issued if it is above the last issued version; it never lowers
// it. See Version stamps in the package documentation.
func (h *Handle) NoteHolderVersion(v Timestamp) {
	sh := h.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c := h.getCold(); h.flags()&flagHasVersion == 0 || v > c.lastVer {
		c.lastVer = v
		h.setFlags(flagHasVersion)
	}
}
