package locktable

// rangeSet holds the range locks and queued range requests of one column family in three trees
// (rangetree.go): the range locks held shared, those held exclusive, and the queued requests. A
// request for a key or range looks only in the trees that can hold what conflicts with it, so a
// shared key lock under R shared ranges that cover it finds in O(log R) that none of them
// conflicts, and a key whose holders change finds in O(log Q) whether a range request queued over
// it could now be served, without a walk of the ranges held over it.
type rangeSet struct {
	shared, exclusive rangeTree // the range locks held, by mode
	queued            rangeTree // the queued range requests, upgrades included
	n                 int
	// tried counts the queued requests serveRanges looked at, for the tests that bound its cost.
	tried uint64
	// scanned counts the queued range requests the wait-for graph's searches stepped over to find
	// the nearest one over a request (nearestRangeAhead), for the tests that bound their cost.
	scanned uint64
}

// steps counts the steps of the set's searches and serves so far: the nodes they visited, the
// queued requests tried and those scanned.
func (s *rangeSet) steps() uint64 {
	return s.shared.steps + s.exclusive.steps + s.queued.steps + s.tried + s.scanned
}

// treeFor is the tree it belongs in now: by whether it is queued, and by its claim's mode.
func (s *rangeSet) treeFor(it *rangeItem) *rangeTree {
	switch {
	case it.w != nil:
		return &s.queued
	case it.h.flags()&flagShared != 0:
		return &s.shared
	}
	return &s.exclusive
}

// insert puts it in the tree it belongs in.
func (s *rangeSet) insert(it *rangeItem) {
	s.treeFor(it).insert(it)
	s.n++
}

// remove takes it out of its tree; a no-op for an item in none.
func (s *rangeSet) remove(it *rangeItem) {
	if it.tree == nil {
		return
	}
	it.tree.remove(it)
	s.n--
}

// refile moves it, if it is in a tree, to the one it belongs in now: after it was granted, or
// its claim's mode changed.
func (s *rangeSet) refile(it *rangeItem) {
	if it.tree != nil && it.tree != s.treeFor(it) {
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
	return s.shared.holdsSpan(start, end) || s.exclusive.holdsSpan(start, end) || s.queued.holdsSpan(start, end)
}

// meeting calls f on every item whose span meets [start, end) (end nil: no bound), until f
// returns false: the range locks held, then the queued requests, each in order of start.
func (s *rangeSet) meeting(start, end []byte, f func(*rangeItem) bool) {
	stop := false
	more := func(it *rangeItem) bool {
		stop = !f(it)
		return !stop
	}
	for _, t := range []*rangeTree{&s.shared, &s.exclusive, &s.queued} {
		if t.meeting(start, end, more); stop {
			return
		}
	}
}

// heldConflicting calls f, until it returns false, on the range locks that meet h's key set (its
// key, or a range claim's span) in a mode that can conflict with h's: only the exclusive ones for
// a shared request. f decides the owner.
func (s *rangeSet) heldConflicting(h *Claim, f func(*rangeItem) bool) {
	stop := false
	more := func(it *rangeItem) bool {
		stop = !f(it)
		return !stop
	}
	trees := []*rangeTree{&s.exclusive, &s.shared}
	if h.flags()&flagShared != 0 {
		trees = trees[:1]
	}
	for _, t := range trees {
		if h.isRange() {
			t.meeting(h.key(), h.cold.span.end, more)
		} else {
			t.containing(h.key(), more)
		}
		if stop {
			return
		}
	}
}

// queuedOver calls f, until it returns false, on the queued range requests that meet h's key set.
func (s *rangeSet) queuedOver(h *Claim, f func(*rangeItem) bool) {
	if h.isRange() {
		s.queued.meeting(h.key(), h.cold.span.end, f)
		return
	}
	s.queued.containing(h.key(), f)
}

// mayConflict reports whether some range lock or queued request holds key in a mode that can
// conflict with a request for it, shared when shared: one path down each tree asked.
func (s *rangeSet) mayConflict(key []byte, shared bool) bool {
	return s.exclusive.containsAny(key) || s.queued.containsAny(key) || !shared && s.shared.containsAny(key)
}
