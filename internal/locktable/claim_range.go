package locktable

import (
	"bytes"

	"github.com/recordlock/recordlock/internal/spans"
)

// Range claims: a lock of every key k of a column family with start <= k < end (docs/DESIGN.md
// §17). A range claim is a Claim in every respect but its key set; its start is its key, and the
// rest of its span lives in its cold part, which a range claim always has.

const (
	// flagRange marks a range claim, from prepareRange on.
	flagRange uint32 = flagOwnerHolds << (iota + 1)
	// flagInHomeShard marks the holder of a key brought into its column family's home shard
	// (rangeadopt.go).
	flagInHomeShard
)

// span is the key set of a range claim: Start is the claim's key (the same bytes), End nil means
// no upper bound. The trees of the claim's range space and the versions of its cover point at it.
type span struct {
	spans.Span
	item rangeItem // the claim's place among the ranges of its column family
}

// prepareRange readies h, before it is published, for a request of tenant t for the keys k of
// column family cf with start <= k < end (end nil: no upper bound), with the initial flags of
// prepare. It copies start and end; the caller has checked that end is nil or after start. It
// makes the column family's range space (rangespace.go), if it has none yet, so that Acquire, which
// takes the range, finds the table's map of range spaces set and hands it to acquireRange.
func (h *Claim) prepareRange(t *Tenant, cf uint32, start, end []byte, flags uint32) {
	t.tab.spaceFor(cf)
	h.prepare(t, cf, start, flags|flagRange)
	s := &span{Span: spans.Span{Start: h.key()}}
	if end != nil {
		s.End = bytes.Clone(end)
	}
	s.item.Value = h
	h.cold = &Cold{span: s}
}

// isRange reports whether h is a range claim.
func (h *Claim) isRange() bool { return h.flags()&flagRange != 0 }

// spanContains reports whether key is in [start, end), end nil meaning no upper bound.
func spanContains(start, end, key []byte) bool {
	return bytes.Compare(start, key) <= 0 && (end == nil || bytes.Compare(key, end) < 0)
}

// spansMeet reports whether [s1, e1) and [s2, e2) share a key, a nil end meaning no bound.
func spansMeet(s1, e1, s2, e2 []byte) bool {
	return (e2 == nil || bytes.Compare(s1, e2) < 0) && (e1 == nil || bytes.Compare(s2, e1) < 0)
}
