package recordlock

import "github.com/recordlock/recordlock/internal/locktable"

// Lock-ordered version stamps of a holder's writes (docs/DESIGN.md §9), for databases that
// version their records: see Version stamps in the package documentation. The table keeps them
// (locktable.Claim.Stamp).

// HolderVersionCandidate returns the version the next holder write would get, at least floor,
// without recording it: max(last issued + 1, or AcquiredAt if none; AcquiredAt; the candidate
// floor; floor). See Version stamps in the package documentation.
func (h *Handle) HolderVersionCandidate(floor Timestamp) Timestamp {
	return Timestamp(h.claim.Stamp(locktable.StampPeek, int64(floor)))
}

// NextHolderVersion returns the candidate version and records it as issued. See Version stamps in
// the package documentation.
func (h *Handle) NextHolderVersion() Timestamp {
	return Timestamp(h.claim.Stamp(locktable.StampNext, 0))
}

// NoteCandidateFloor raises the floor of later candidates without counting as a write. See
// Version stamps in the package documentation.
func (h *Handle) NoteCandidateFloor(v Timestamp) { h.claim.Stamp(locktable.StampFloor, int64(v)) }

// NoteHolderVersion records v as issued if it is above the last issued version; it never lowers
// it. See Version stamps in the package documentation.
func (h *Handle) NoteHolderVersion(v Timestamp) { h.claim.Stamp(locktable.StampNote, int64(v)) }
