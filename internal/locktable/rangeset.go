package locktable

import "github.com/recordlock/recordlock/internal/invariants"

// rangeSet holds the range locks and queued range requests of one column family in three trees
// (rangetree.go): the range locks held shared, those held exclusive, and the queued requests. A
// request for a key or range looks only in the trees that can hold what conflicts with it, so a
// shared key lock under R shared ranges that cover it finds in O(log R) that none of them
// conflicts, and a key whose holders change finds in O(log Q) whether a range request queued over
// it could now be served, without a walk of the ranges held over it.
type rangeSet struct {
	shared, exclusive rangeTree // the range locks held, by mode
	queued            rangeTree // the queued range requests, upgrades included
	// tried counts the queued requests serveRanges looked at, for the tests that bound its cost.
	tried invariants.Counter
	// scanned counts the queued range requests the wait-for graph's searches stepped over to find
	// the nearest one over a request (nearestRangeAhead), for the tests that bound their cost.
	scanned invariants.Counter
	n       int
}

// steps counts the steps of the set's searches and serves so far: the nodes they visited, the
// queued requests tried and those scanned. Counted only with the tag invariants: 0 without.
func (s *rangeSet) steps() uint64 {
	return s.shared.Steps() + s.exclusive.Steps() + s.queued.Steps() + s.tried.Load() + s.scanned.Load()
}

// inTree is which tree of its rangeSet an item is in.
type inTree uint8

const (
	inNone inTree = iota
	inShared
	inExclusive
	inQueued
)

// tree is the tree of s that in names; nil for inNone.
func (s *rangeSet) tree(in inTree) *rangeTree {
	switch in {
	case inShared:
		return &s.shared
	case inExclusive:
		return &s.exclusive
	case inQueued:
		return &s.queued
	}
	return nil
}

// treeFor is the tree it belongs in now: by whether it is queued, and by its claim's mode.
func (s *rangeSet) treeFor(it *rangeItem) inTree {
	switch {
	case it.w != nil:
		return inQueued
	case it.Value.flags()&flagShared != 0:
		return inShared
	}
	return inExclusive
}

// insert puts it, which is in no tree, in the tree it belongs in.
func (s *rangeSet) insert(it *rangeItem) {
	it.in = s.treeFor(it)
	s.tree(it.in).Insert(&it.Node)
	s.n++
}

// remove takes it out of its tree; a no-op for an item in none.
func (s *rangeSet) remove(it *rangeItem) {
	if it.in == inNone {
		return
	}
	s.tree(it.in).Remove(&it.Node)
	it.in = inNone
	s.n--
}

// refile moves it, if it is in a tree, to the one it belongs in now: after it was granted, or
// its claim's mode changed.
func (s *rangeSet) refile(it *rangeItem) {
	if it.in != inNone && it.in != s.treeFor(it) {
		s.remove(it)
		s.insert(it)
	}
}

// holdsSpan reports whether the span of one of the set's range locks or requests contains all
// of [start, end) (end nil: no bound). Such a span's keys are all in the home shard: a request
// joins the set only once the keys inside it were brought in (acquireRange), and leaves it as its
// span leaves the cover (spanGone), and every key made inside a live span since was made there.
// A range request inside one brings in nothing.
func (s *rangeSet) holdsSpan(start, end []byte) bool {
	return s.shared.Encloses(start, end) || s.exclusive.Encloses(start, end) || s.queued.Encloses(start, end)
}

// meeting calls f on the claim of every item whose span meets [start, end) (end nil: no bound),
// until f returns false: the range locks held, then the queued requests, each in order of start.
func (s *rangeSet) meeting(start, end []byte, f func(*Claim) bool) {
	stop := false
	more := func(y *Claim) bool {
		stop = !f(y)
		return !stop
	}
	for _, t := range []*rangeTree{&s.shared, &s.exclusive, &s.queued} {
		if t.Meeting(start, end, more); stop {
			return
		}
	}
}

// heldConflicting calls f, until it returns false, on the range locks that meet h's key set (its
// key, or a range claim's span) in a mode that can conflict with h's: only the exclusive ones for
// a shared request. f decides the owner.
func (s *rangeSet) heldConflicting(h *Claim, f func(*Claim) bool) {
	stop := false
	more := func(y *Claim) bool {
		stop = !f(y)
		return !stop
	}
	trees := []*rangeTree{&s.exclusive, &s.shared}
	if h.flags()&flagShared != 0 {
		trees = trees[:1]
	}
	for _, t := range trees {
		if h.isRange() {
			t.Meeting(h.key(), h.cold.span.End, more)
		} else {
			t.Containing(h.key(), more)
		}
		if stop {
			return
		}
	}
}

// queuedOver calls f, until it returns false, on the claims of the queued range requests that
// meet h's key set.
func (s *rangeSet) queuedOver(h *Claim, f func(*Claim) bool) {
	if h.isRange() {
		s.queued.Meeting(h.key(), h.cold.span.End, f)
		return
	}
	s.queued.Containing(h.key(), f)
}

// mayConflict reports whether some range lock or queued request holds key in a mode that can
// conflict with a request for it, shared when shared: one path down each tree asked.
func (s *rangeSet) mayConflict(key []byte, shared bool) bool {
	return s.exclusive.Covers(key) || s.queued.Covers(key) || !shared && s.shared.Covers(key)
}
