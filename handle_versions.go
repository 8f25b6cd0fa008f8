package recordlock

// Lock-ordered version stamps of a holder's writes (docs/DESIGN.md §9), for databases that
// version their records: see Version stamps in the package documentation.

// HolderVersionCandidate returns the version the next holder write would get, at least floor,
// without recording it: max(last issued + 1, or AcquiredAt if none; AcquiredAt; the candidate
// floor; floor). See Version stamps in the package documentation.
func (h *Handle) HolderVersionCandidate(floor Timestamp) Timestamp {
	h.hold.Lock()
	defer h.hold.Unlock()
	return h.candidate(floor)
}

func (h *Handle) candidate(floor Timestamp) Timestamp {
	v := max(Timestamp(h.hold.AcquiredAt()), floor)
	if c := h.hold.ColdIfAny(); c != nil {
		v = max(v, Timestamp(c.Floor))
		if h.flags()&flagHasVersion != 0 {
			v = max(v, Timestamp(c.LastVer)+1)
		}
	}
	return v
}

// NextHolderVersion returns the candidate version and records it as issued. See Version stamps in
// the package documentation.
func (h *Handle) NextHolderVersion() Timestamp {
	h.hold.Lock()
	defer h.hold.Unlock()
	return h.nextVersion()
}

func (h *Handle) nextVersion() Timestamp {
	v := h.candidate(0)
	h.hold.Cold().LastVer = int64(v)
	h.hold.SetFlags(flagHasVersion)
	return v
}

// NoteCandidateFloor raises the floor of later candidates without counting as a write. See
// Version stamps in the package documentation.
func (h *Handle) NoteCandidateFloor(v Timestamp) {
	h.hold.Lock()
	defer h.hold.Unlock()
	c := h.hold.Cold()
	c.Floor = max(c.Floor, int64(v))
}

// NoteHolderVersion records v as issued if it is above the last issued version; it never lowers
// it. See Version stamps in the package documentation.
func (h *Handle) NoteHolderVersion(v Timestamp) {
	h.hold.Lock()
	defer h.hold.Unlock()
	if c := h.hold.Cold(); h.flags()&flagHasVersion == 0 || int64(v) > c.LastVer {
		c.LastVer = int64(v)
		h.hold.SetFlags(flagHasVersion)
	}
}
