package locktable

import "github.com/recordlock/recordlock/internal/spans"

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
	holder, throughHolder func(*Claim)
	passed                []*waiter // the requests of no owner already passed through
}

// rangeEdges adds to s the owners that w, the waiting request of h in sp, waits for by range
// mode's rule. For a key's request the edges to its key's own holders are the key's rule's
// (waitgraph.go); its edges to the requests queued ahead of it for its key are added here, since
// in a range space they need not wait for the same holders as it does.
func (sp *rangeSpace) rangeEdges(h *Claim, w *waiter, s *rangeEdgeSink) {
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
//
// A plain exclusive range request (plainExclusive) queued behind others of its span is the
// exception: it reads them through the oldest of them (runHead).
func (sp *rangeSpace) requestsAhead(x *waiter, f func(*waiter)) {
	if head := sp.runHead(x); head != nil {
		sp.keyRequestsAfter(x, head.seq, f)
		sp.requestsAhead(head, f)
		return
	}
	sp.queuedAhead(x, func(y *waiter) bool {
		if sameQueue(x, y) || !sp.passes(x.h, y) {
			f(y)
		}
		return true
	})
}

// sameQueue reports whether x and y are queued for one key, with their shard's mutex held: that
// key's queue is served from its head, so there a request passes others by its place alone
// (rangepass.go).
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
func (sp *rangeSpace) holdersBlocking(x *Claim, f func(*Claim)) {
	each := func(e *keyEntry) bool {
		for _, y := range e.appendHolders(nil) {
			if conflicts(x, y) {
				f(y)
			}
		}
		return true
	}
	if x.isRange() {
		sp.keysIn(x.key(), x.cold.span.End, each)
	} else if x.e != nil {
		each(x.e)
	}
	sp.rangeHolders(x, f)
}

// rangeHolders calls f on the range locks of sp that meet x's key set and conflict with x.
func (sp *rangeSpace) rangeHolders(x *Claim, f func(*Claim)) {
	sp.ranges.heldConflicting(x, func(y *Claim) bool {
		if conflicts(x, y) {
			f(y)
		}
		return true
	})
}

// plainExclusive reports whether w is a range request that asks for its range exclusively and
// passes no request (rangepass.go), with the home shard's mutex held: of no owner, or of an owner
// that held nothing when it asked, and so holds nothing while it waits. Such a request conflicts
// with every request of another owner that meets its range.
func plainExclusive(w *waiter) bool {
	h := w.h
	return w.space != nil && w.seq != 0 && h.flags()&flagShared == 0 && (h.owner == nil || h.flags()&flagOwnerHolds == 0)
}

// sameSpan reports whether the range claims a and b cover the same keys.
func sameSpan(a, b *Claim) bool {
	ae, be := a.cold.span.End, b.cold.span.End
	return spans.Compare(a.key(), b.key()) == 0 && (ae == nil) == (be == nil) && spans.Compare(ae, be) == 0
}

// runHead returns, for x, a queued plain exclusive range request (plainExclusive), the oldest
// request of the run of plain exclusive requests of x's span that x is queued behind: the nearest
// range request queued before x that meets its span and conflicts with it, if that is one of
// them, that one's nearest in turn, and so on; nil when the nearest is none of them, or there is
// none. Any two of the run wait for the same holders (their owners hold nothing), and the later
// waits for everything the earlier does, so the edges of x are those of the head, but to the
// head itself and the rest of the run, plus those to the key requests queued between the head
// and x (docs/DESIGN.md §17.3): a path through a request of the run has a path without it. That
// keeps a check of N Txns queued for one hot range at one edge per holder each, where edges to
// each request of the run would make the N checks cost O(N³) steps.
//
// The head found is kept in x and used while it is queued: no range request can queue between
// two queued ones, so the run behind a queued head stays one.
func (sp *rangeSpace) runHead(x *waiter) *waiter {
	if !plainExclusive(x) {
		return nil
	}
	if h := x.runHead; h != nil && !h.left {
		return h
	}
	x.runHead = nil
	z := sp.nearestRangeAhead(x)
	if z == nil || !plainExclusive(z) || !sameSpan(z.h, x.h) {
		return nil
	}
	head := z
	if zh := sp.runHead(z); zh != nil {
		head = zh
	}
	x.runHead = head
	return head
}

// nearestRangeAhead returns the range request queued last before x, a queued range request that
// passes none (plainExclusive), that meets its span and conflicts with it, or nil. The queue is in
// order of arrival (seq), so x is found by a binary search, and the walk back from it ends at the
// first request over its span.
func (sp *rangeSpace) nearestRangeAhead(x *waiter) *waiter {
	older := sp.queuedBefore(x)
	start, end := x.h.key(), x.h.cold.span.End
	for i := len(older) - 1; i >= 0; i-- {
		y := older[i]
		sp.ranges.scanned.Inc()
		if spansMeet(y.start(), y.end(), start, end) && conflicts(x.h, y.Value) {
			return y.w
		}
	}
	return nil
}

// keyRequestsAfter calls f on the requests for the keys inside the range of x, a queued range
// request that passes none, that conflict with it and were queued after the one placed seq in the
// order of arrival and before x.
func (sp *rangeSpace) keyRequestsAfter(x *waiter, seq uint64, f func(*waiter)) {
	xh := x.h
	sp.keysIn(xh.key(), xh.cold.span.End, func(e *keyEntry) bool {
		for y := e.head; y != nil; y = y.next {
			if y.seq > seq && y.seq < x.seq && conflicts(xh, y.h) {
				f(y)
			}
		}
		return true
	})
}
