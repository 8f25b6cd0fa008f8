package locktable

import "bytes"

// Range holds: a lock of every key k of a column family with start <= k < end (docs/DESIGN.md
// §17). A range hold is a Hold in every respect but its key set; its start is its Key, and the
// rest of its span lives in its cold part, which a range hold always has.

const (
	// FlagRange marks a range hold, from InitRange on.
	FlagRange uint32 = FlagOwnerHolds << (iota + 1)
	// FlagInHomeShard marks the holder of a key brought into its column family's home shard (rangeadopt.go).
	FlagInHomeShard
)

// span is the key set of a range hold: start is the hold's key, end nil means no upper bound.
type span struct {
	end  []byte
	item rangeItem // the hold's place among the ranges of its column family
}

// InitRange readies h, before it is published, for a request of tenant t for the keys k of column
// family cf with start <= k < end (end nil: no upper bound), with the initial flags of Init. It
// copies start and end; the caller has checked that end is nil or after start. It makes the
// column family's range space (rangespace.go), if it has none yet, so that Acquire, which takes
// the range, goes the way of acquireRouted.
func (h *Hold) InitRange(t *Tenant, cf uint32, start, end []byte, flags uint32) {
	t.tab.spaceFor(cf)
	h.Init(t, cf, start, flags|FlagRange)
	s := &span{}
	if end != nil {
		s.end = bytes.Clone(end)
	}
	s.item.h = h
	h.cold = &Cold{span: s}
}

// IsRange reports whether h is a range hold.
func (h *Hold) IsRange() bool { return h.flags()&FlagRange != 0 }

// RangeEnd is the end of a range hold's span, nil for an unbounded range and for a key's hold.
func (h *Hold) RangeEnd() []byte {
	if !h.IsRange() {
		return nil
	}
	return h.cold.span.end
}

// Covers reports whether h's lock covers the record (cf, key): for a range hold, whether key is
// in its span; for a key's hold, whether it is that record.
func (h *Hold) Covers(cf uint32, key []byte) bool {
	if h.cf != cf {
		return false
	}
	if !h.IsRange() {
		return bytes.Equal(h.key(), key)
	}
	return spanContains(h.key(), h.cold.span.end, key)
}

// spanContains reports whether key is in [start, end), end nil meaning no upper bound.
func spanContains(start, end, key []byte) bool {
	return bytes.Compare(start, key) <= 0 && (end == nil || bytes.Compare(key, end) < 0)
}

// spansMeet reports whether [s1, e1) and [s2, e2) share a key, a nil end meaning no bound.
func spansMeet(s1, e1, s2, e2 []byte) bool {
	return (e2 == nil || bytes.Compare(s1, e2) < 0) && (e1 == nil || bytes.Compare(s2, e1) < 0)
}
