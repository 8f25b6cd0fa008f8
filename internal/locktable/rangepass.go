package locktable

import (
	"slices"
	"time"
)

// The one exception to the order of arrival in range mode (docs/DESIGN.md §17.2): a request of an
// owner never waits behind a queued request that waits for a lock that owner holds, itself or
// through the requests it waits behind. That request cannot be served before the owner lets go
// anyway, so passing it starves nobody, and waiting behind it would be a deadlock: a writer that
// holds key a and asks for key b would otherwise queue behind a reader's range request over both,
// which waits for a. Everything here runs under the home shard's mutex.

// passes reports whether h, a request, may pass x, a request queued before it: h's owner holds
// locks (FlagOwnerHolds), and x waits for one of them (waitsForOwner).
func (sp *rangeSpace) passes(h *Hold, x *waiter) bool {
	o := h.owner
	if o == nil || h.flags()&FlagOwnerHolds == 0 || x.h.owner == o {
		return false
	}
	var seen []*waiter
	return sp.waitsForOwner(x, o, &seen)
}

// waitsForOwner reports whether x, a request queued in sp, waits for a lock o holds: it conflicts
// with one that meets its key set, or it is queued behind a conflicting request of another owner
// that does (queuedAhead). seen are the requests looked at already, each once.
func (sp *rangeSpace) waitsForOwner(x *waiter, o Owner, seen *[]*waiter) bool {
	if slices.Contains(*seen, x) {
		return false
	}
	*seen = append(*seen, x)
	if sp.conflictsWithLocksOf(x, o) {
		return true
	}
	found := false
	sp.queuedAhead(x, func(y *waiter) bool {
		found = y.h.owner != o && sp.waitsForOwner(y, o, seen)
		return !found
	})
	return found
}

// conflictsWithLocksOf reports whether x, a request queued in sp, conflicts with a lock o holds
// that meets its key set: a range lock, or a key's lock of its key or of a key inside its range.
func (sp *rangeSpace) conflictsWithLocksOf(x *waiter, o Owner) bool {
	xh := x.h
	found := false
	sp.ranges.heldConflicting(xh, func(it *rangeItem) bool {
		found = it.h.owner == o && conflicts(xh, it.h)
		return !found
	})
	if found {
		return true
	}
	holds := func(y *Hold) bool { return y.owner == o && conflicts(xh, y) }
	held := func(e *keyEntry) bool {
		if e.holder == nil {
			return true
		}
		found = holds(e.holder)
		for _, y := range e.sharers {
			found = found || holds(y)
		}
		return !found
	}
	switch {
	case x.space != nil:
		sp.keysIn(xh.key(), xh.cold.span.end, held)
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
		sp.keysIn(xh.key(), xh.cold.span.end, func(e *keyEntry) bool {
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
	sp.ranges.queuedOver(xh, func(it *rangeItem) bool {
		if it.w.seq < x.seq && conflicts(xh, it.h) {
			more = f(it.w)
		}
		return more
	})
}

// placeNewcomer decides h, a newcomer's request for e's key, of a column family in range mode,
// as far as the key's own holders and queue go (keyBlocked decides the ranges): whether it takes
// the key at once, and if not, the request it queues ahead of, or nil for the tail. It passes the
// first request queued for the key that waits for its owner (passes) and all behind it; of those
// ahead of it, one it conflicts with keeps it waiting (a newcomer's shared request so is not kept
// by shared requests that a range keeps from the key), and then an exclusive request may still
// take a key freed for a woken waiter within the barging window (keyEntry.admits). mono is a
// reading of c's clock.
func (sp *rangeSpace) placeNewcomer(e *keyEntry, h *Hold, c *Tenant, mono time.Duration) (admitted bool, before *waiter) {
	if h.owner != nil && h.flags()&FlagOwnerHolds != 0 {
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
	if h.flags()&FlagShared != 0 {
		return e.holder == nil || e.shares > 0, before
	}
	return e.holder == nil, before
}

// ownerLetGo is called as h, a lock in a column family in range mode, is given back: if h has an
// owner and some owner waits, the owner's wait, if it waits, is checked for a cycle again once the
// mutex is released. Its request may have passed a request that waited for h; it no longer does,
// and the edge to that one is new.
func (sh *shard) ownerLetGo(h *Hold) {
	if h.owner != nil && sh.tab.graph.count.Load() > 0 {
		sh.deferred = append(sh.deferred, deferredCall{regraph: &sh.tab.graph, owner: h.owner})
	}
}
