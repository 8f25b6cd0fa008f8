package locktable

// The wait-for edges in a range space (docs/DESIGN.md §17): a request waits for every conflicting
// holder of a key or range that meets it, and for every conflicting request queued before it.
// A request of no owner queued before it passes on its own waits: the request behind waits,
// through it, for everything that request waits for, the holders it conflicts with and the
// requests queued before it, whose own waits a request of no owner passes on again. In a range
// space a request's own owner can be among those: its locks never conflict with its own request, but
// they do with a request of no owner queued ahead of it, which it cannot pass.

// rangeEdgeSink receives the owners rangeEdges finds. owner and holder skip the waiting owner
// itself; through and throughHolder, for what a request of no owner passes on, do not. holder
// and throughHolder skip a holder whose lease has passed.
type rangeEdgeSink struct {
	owner, through        func(Owner)
	holder, throughHolder func(*Hold)
	passed                []*waiter // the requests of no owner already passed through
}

// rangeEdges adds to s the owners that w, the waiting request of h in sp, waits for by range
// mode's rule. For a key's request the edges to its key's own holders are the key's rule's
// (waitgraph.go); its edges to the requests queued ahead of it for its key are added here, since
// in a range space they need not wait for the same holders as it does.
func (sp *rangeSpace) rangeEdges(h *Hold, w *waiter, s *rangeEdgeSink) {
	sp.requestsAhead(w, func(x *waiter) { sp.passOn(x, s, s.owner) })
	if w.space == nil { // a key's request: the range locks over its key
		sp.rangeHolders(h, s.holder)
		return
	}
	sp.holdersBlocking(h, s.holder)
}

// requestsAhead calls f on every request that conflicts with x, a queued request of sp, and is
// served before it: for a key's request, those queued ahead of it for its key, and the range
// requests over its key queued before it; for a range request, the requests for the keys inside
// it and the range requests over it queued before it (queuedAhead), but those that x passes
// (rangepass.go), which are not served before it. In its key's queue a request passes others by
// its place, where it queues or is moved to (repass); the ones ahead of it it waits for.
func (sp *rangeSpace) requestsAhead(x *waiter, f func(*waiter)) {
	sp.queuedAhead(x, func(y *waiter) bool {
		if sameQueue(x, y) || !sp.passes(x.h, y) {
			f(y)
		}
		return true
	})
}

// sameQueue reports whether x and y are queued for one key, whose queue is served from its head:
// there a request passes others by its place alone (rangepass.go).
func sameQueue(x, y *waiter) bool { return x.space == nil && y.space == nil && x.h.e == y.h.e }

// passOn adds x's owner through add, or, for a request of no owner, everything it waits for
// through s.through and s.throughHolder, once per request.
func (sp *rangeSpace) passOn(x *waiter, s *rangeEdgeSink, add func(Owner)) {
	if x.h.owner != nil {
		add(x.h.owner)
		return
	}
	for _, p := range s.passed {
		if p == x {
			return
		}
	}
	s.passed = append(s.passed, x)
	sp.holdersBlocking(x.h, s.throughHolder)
	sp.requestsAhead(x, func(y *waiter) { sp.passOn(y, s, s.through) })
}

// holdersBlocking calls f on the holders that conflict with x, a queued request of sp: those of
// its key or of the keys in its range, and the range locks that meet it.
func (sp *rangeSpace) holdersBlocking(x *Hold, f func(*Hold)) {
	each := func(e *keyEntry) bool {
		for _, y := range e.appendHolders(nil) {
			if conflicts(x, y) {
				f(y)
			}
		}
		return true
	}
	if x.IsRange() {
		sp.keysIn(x.key(), x.cold.span.end, each)
	} else if x.e != nil {
		each(x.e)
	}
	sp.rangeHolders(x, f)
}

// rangeHolders calls f on the range locks of sp that meet x's key set and conflict with x.
func (sp *rangeSpace) rangeHolders(x *Hold, f func(*Hold)) {
	sp.ranges.heldConflicting(x, func(it *rangeItem) bool {
		if conflicts(x, it.h) {
			f(it.h)
		}
		return true
	})
}
