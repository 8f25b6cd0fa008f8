package locktable

import (
	"bytes"
	"cmp"
	"math/bits"
	"slices"
	"time"
)

// The one exception to the order of arrival in a range space (docs/DESIGN.md §17.2): a request of an
// owner never waits behind a queued request that waits for a lock that owner holds, itself or
// through the requests it waits behind. That request cannot be served before the owner lets go
// anyway, so passing it starves nobody, and waiting behind it would be a deadlock: a writer that
// holds key a and asks for key b would otherwise queue behind a reader's range request over both,
// which waits for a. Everything here runs under the home shard's mutex.

// passes reports whether h, a request, may pass x, a request queued before it: h's owner holds
// locks (flagOwnerHolds), and x waits for one of them (waitsForOwner).
func (sp *rangeSpace) passes(h *Claim, x *waiter) bool { return sp.passesBy(h, x, true) }

// passesBy is passes. With exact false, a request queued behind a conflicting one counts as
// waiting for it even where it passes that one itself: the search that asks whether it does
// (passer.exact) looks one level down only, so that it ends.
func (sp *rangeSpace) passesBy(h *Claim, x *waiter, exact bool) bool {
	o := h.owner
	if o == nil || h.flags()&flagOwnerHolds == 0 || x.h.owner == o {
		return false
	}
	var seen []*waiter
	return sp.waitsForOwner(x, passer{o: o, at: h.key(), direct: true, exact: exact}, &seen)
}

// passer is the owner whose request asks whether it may pass (waitsForOwner), with that request's
// key (a range request's start), and whether the wait looked at is the request passed itself
// (direct) or one reached through another owner's request or wait.
//
// A wait reached through another owner counts only where it ends at a lock of o whose key (a range
// lock's start) is below at, never at o's own request (the one asking, which a newcomer's first
// look would not see). A Txn that locks in key order only asks above the keys it holds, so every
// pass its ordered waits need still happens; a Txn that asks below a key it holds is out of order,
// no promise covers it, and were it to pass through the other owners' waits it would hide a cycle
// that closes through them: it queues, and the cycle fails as a deadlock.
//
// With exact, a request that passes one queued ahead of it does not wait behind it (passesBy).
type passer struct {
	o      Owner
	at     []byte
	direct bool
	exact  bool
}

// endsAt reports whether y, a lock of p.o that a wait looked at conflicts with, makes that wait
// one for p.o. A range lock that starts at p.at counts too: its owner asks for a key inside a range
// it holds, which never queues behind that range's waiters.
func (p passer) endsAt(y *Claim) bool {
	if p.direct {
		return true
	}
	c := bytes.Compare(y.key(), p.at)
	return c < 0 || c == 0 && y.flags()&flagRange != 0
}

// waitsForOwner reports whether x, a request queued in sp, cannot be served before p.o lets go: it
// conflicts with a lock p.o holds that meets its key set; or it is queued behind a conflicting
// request (queuedAhead), which it does not pass itself, that is p.o's own or that waits for p.o in
// turn; or it conflicts with a
// lock of another owner whose request in this column family waits for p.o in turn. Past x itself,
// only the locks of p.o below p.at count, and not p.o's request (passer). seen are the requests looked at already, each
// once: x alone is looked at as direct. (A wait through an owner's request in another column
// family is not followed: the wait-for graph sees it, and a cycle through it fails as a deadlock.)
func (sp *rangeSpace) waitsForOwner(x *waiter, p passer, seen *[]*waiter) bool {
	if slices.Contains(*seen, x) {
		return false
	}
	*seen = append(*seen, x)
	if sp.conflictsWithLocksOf(x, p, seen) {
		return true
	}
	through := p
	through.direct = false
	found := false
	sp.queuedAhead(x, func(y *waiter) bool {
		switch {
		case y.h.owner == p.o:
			found = p.direct // a chain through another owner ends only at a lock of p.o
		case p.exact && (x.space != nil || y.space != nil) && sp.passesBy(x.h, y, false):
			// y waits for what x's own owner holds: x passes y in the grant rule and does not
			// wait behind it (within one key's queue the order already says who passed whom).
		default:
			found = sp.waitsForOwner(y, through, seen)
		}
		return !found
	})
	return found
}

// conflictsWithLocksOf reports whether x, a request queued in sp, conflicts with a lock that meets
// its key set, a range lock or a key's lock of its key or of a key inside its range, that p.o
// holds (and that p.endsAt), or that an owner holds whose request queued in sp waits for p.o
// (waitsForOwner, with seen).
func (sp *rangeSpace) conflictsWithLocksOf(x *waiter, p passer, seen *[]*waiter) bool {
	xh := x.h
	through := p
	through.direct = false
	found := false
	holds := func(y *Claim) bool {
		if y.owner == nil || !conflicts(xh, y) {
			return false
		}
		if y.owner == p.o {
			return p.endsAt(y)
		}
		u := sp.waiting[y.owner]
		return u != nil && sp.waitsForOwner(u, through, seen)
	}
	sp.ranges.heldConflicting(xh, func(y *Claim) bool {
		found = holds(y)
		return !found
	})
	if found {
		return true
	}
	held := func(e *keyEntry) bool {
		if e.holder == nil {
			return true
		}
		found = holds(e.holder)
		for _, y := range e.others() {
			found = found || holds(y)
		}
		return !found
	}
	switch {
	case x.space != nil:
		sp.keysIn(xh.key(), xh.cold.span.End, held)
	case xh.e != nil:
		held(xh.e)
	}
	return found
}

// queuedAhead calls f, until it returns false, on every request that conflicts with x, a queued
// request of sp, and was queued ahead of it: for a key's request, those ahead of it in its key's
// queue, and the range requests over its key queued before it; for a range request, the requests
// for the keys inside it and the range requests over it queued before it.
func (sp *rangeSpace) queuedAhead(x *waiter, f func(*waiter) bool) {
	xh := x.h
	more := true
	if x.space == nil {
		for y := xh.e.head; y != nil && y != x && more; y = y.next {
			if conflicts(xh, y.h) {
				more = f(y)
			}
		}
	} else {
		sp.keysIn(xh.key(), xh.cold.span.End, func(e *keyEntry) bool {
			for y := e.head; y != nil && more; y = y.next {
				if y.seq < x.seq && conflicts(xh, y.h) {
					more = f(y)
				}
			}
			return more
		})
	}
	if !more {
		return
	}
	if x.space != nil {
		if older := sp.queuedBefore(x); len(older) <= 2*bits.Len(uint(sp.ranges.queued.Len())) {
			// Few were queued before x: reading them is cheaper than finding every request over
			// its span, the later ones too, in the tree (the head of a hot range's queue).
			for i := len(older) - 1; i >= 0 && more; i-- {
				it := older[i]
				sp.ranges.scanned.Inc()
				if spansMeet(it.start(), it.end(), xh.key(), xh.cold.span.End) && conflicts(xh, it.Value) {
					more = f(it.w)
				}
			}
			return
		}
	}
	sp.ranges.queuedOver(xh, func(y *Claim) bool {
		if w := itemOf(y).w; w.seq < x.seq && conflicts(xh, y) {
			more = f(w)
		}
		return more
	})
}

// queuedBefore returns the range requests queued before x, a queued range request, in the order
// of arrival: the queue is in that order (seq), so a binary search finds x.
func (sp *rangeSpace) queuedBefore(x *waiter) []*rangeItem {
	i, _ := slices.BinarySearchFunc(sp.queue, x.seq, func(it *rangeItem, seq uint64) int { return cmp.Compare(it.w.seq, seq) })
	return sp.queue[:i]
}

// placeNewcomer decides h, a newcomer's request for e's key, in the home shard of a range space,
// as far as the key's own holders and queue go (keyBlocked decides the ranges): whether it takes
// the key at once, and if not, the request it queues ahead of, or nil for the tail. It passes the
// first request queued for the key that waits for its owner (passes) and all behind it; of those
// ahead of it, one it conflicts with keeps it waiting (a newcomer's shared request so is not kept
// by shared requests that a range keeps from the key), and then an exclusive request may still
// take a key freed for a woken waiter within the barging window (keyEntry.admits). mono is a
// reading of c's clock.
func (sp *rangeSpace) placeNewcomer(e *keyEntry, h *Claim, c *Tenant, mono time.Duration) (admitted bool, before *waiter) {
	if h.owner != nil && h.flags()&flagOwnerHolds != 0 {
		for w := e.head; w != nil; w = w.next {
			if sp.passes(h, w) {
				before = w
				break
			}
		}
	}
	for w := e.head; w != before; w = w.next {
		if conflicts(h, w.h) {
			return before == nil && e.admits(h, c, mono), before
		}
	}
	if h.flags()&flagShared != 0 {
		return e.holder == nil || e.shares > 0, before
	}
	return e.holder == nil, before
}
