package recordlock

import (
	"bytes"
	"fmt"
)

// Range is a set of keys of one column family: every k with Start <= k < End, compared bytewise.
// A nil End means no upper bound, and an empty Start the first key, so Range{} is the whole column
// family. A Range whose End is not nil and not after Start is invalid: the calls that take one
// refuse it with an error matching ErrInvalidKey. A Range covers keys whether or not they exist in
// the database. The caller may reuse the slices once a call that took the Range returns.
type Range struct {
	Start, End []byte
}

// Prefix returns the Range of every key that begins with p: Start is a copy of p, End the least
// key after all of them. Prefix(nil) is the whole column family, and a p of 0xFF bytes only has
// no upper bound, since no key after "\xff\xff…" is free of that prefix.
func Prefix(p []byte) Range {
	r := Range{Start: bytes.Clone(p)}
	// The least key after every extension of p: drop the trailing 0xFF bytes and add one to the
	// last byte left. Nothing is left when p is all 0xFF (or empty): then there is no bound.
	// (A byte loop: bytes.TrimRight reads its cutset as UTF-8, where "\xff" is not one byte.)
	n := len(p)
	for n > 0 && p[n-1] == 0xff {
		n--
	}
	if n > 0 {
		r.End = bytes.Clone(p[:n])
		r.End[n-1]++
	}
	return r
}

// check returns nil when r is a valid Range, else an error matching ErrInvalidKey that says why.
// It is the first thing a call that takes a Range does, so an invalid one changes nothing.
func (r Range) check() error {
	switch {
	case len(r.Start) > maxKeyLen:
		return &rangeError{fmt.Sprintf("Start is %d bytes; a bound must be at most 2 GiB", len(r.Start))}
	case len(r.End) > maxKeyLen:
		return &rangeError{fmt.Sprintf("End is %d bytes; a bound must be at most 2 GiB", len(r.End))}
	case r.End != nil && len(r.End) == 0:
		return &rangeError{fmt.Sprintf("End \"\" is not after Start %q (a nil End has no bound)", r.Start)}
	case r.End != nil && bytes.Compare(r.End, r.Start) <= 0:
		return &rangeError{fmt.Sprintf("End %q is not after Start %q", r.End, r.Start)}
	}
	return nil
}

// contains reports whether key is one of r's keys.
func (r Range) contains(key []byte) bool {
	return bytes.Compare(key, r.Start) >= 0 && r.below(key)
}

// below reports whether key is before r's End (always, when r has none).
func (r Range) below(key []byte) bool {
	return r.End == nil || bytes.Compare(key, r.End) < 0
}
