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
		for _, y := range e.sharers {
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
				sp.ranges.scanned++
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

// ownerLetGo is called as h, a lock in the home shard of a range space, is given back: if h has an
// owner and some owner waits, the waits that may have passed a request because of h are checked
// for a cycle again once the mutex is released (recheckWaiting). Such a request no longer passes
// the ones that waited for h, and the edge to each of those is new; and the requests it is then
// behind may now be passed in turn, so the space's queues are gone over again (markRepass).
func (sh *shard) ownerLetGo(h *Claim) {
	if h.owner == nil {
		return
	}
	sp := sh.spaces[h.cf]
	marked := sp != nil && sh.markRepass(sp)
	if sh.tab.graph.count.Load() == 0 {
		return
	}
	sh.deferred = append(sh.deferred, deferredCall{regraph: &sh.tab.graph, owner: h.owner})
	if sp != nil && !marked {
		sh.recheckWaiting(sp)
	}
}

// markRepass has sp's queues gone over again before the home shard's mutex is released
// (repassDueSpaces), if two owners or more wait there, and reports whether it marked sp: a lock
// or a request of an owner in sp ended, and a request that passed another because of it now
// waits behind that one, and so for what it waits for. A request that waits for an owner so is
// one a request of that owner passes, and it must not stay queued behind it (docs/DESIGN.md
// §17.2). Marking has the waits of the owners in sp checked again too (recheckWaiting), which
// gives drainDeferred, where the marked spaces are gone over, a call to run.
func (sh *shard) markRepass(sp *rangeSpace) bool {
	if sp.repassDue || len(sp.waiting) < 2 {
		return false
	}
	sp.repassDue = true
	sh.repassDue = append(sh.repassDue, sp)
	sh.recheckWaiting(sp)
	return true
}

// repassDueSpaces serves the waiting owners of each space marked by markRepass, moving first the
// requests that pass one queued ahead of them now (serveWaitingOwners). Serving may grant a
// request and so mark the space again; each round that does grants one at least, so it ends.
func (sh *shard) repassDueSpaces() {
	for len(sh.repassDue) > 0 {
		sp := sh.repassDue[len(sh.repassDue)-1]
		sh.repassDue = sh.repassDue[:len(sh.repassDue)-1]
		sp.repassDue = false
		sh.serveWaitingOwners(sp, nil)
	}
	sh.repassDue = nil
}

// recheckWaiting has the wait of every owner with a request queued in sp checked for a cycle
// again once the mutex is released: a lock or a request of another owner there ended, through
// which a request may have passed others (waitsForOwner), and the edges it has then are new.
func (sh *shard) recheckWaiting(sp *rangeSpace) {
	for o := range sp.waiting {
		sh.deferred = append(sh.deferred, deferredCall{regraph: &sh.tab.graph, owner: o})
	}
}

// list records w, a request of an owner just queued for e's key (for a range request, e is nil),
// as its owner's request in its key's range space, if it is in the home shard.
func (sh *shard) list(e *keyEntry, w *waiter) {
	sp := w.space
	if sp == nil && e != nil {
		if rk := e.ranged(); rk != nil {
			sp = rk.space
		}
	}
	if sp != nil {
		sp.listed(w)
	}
}

// listed records w, a queued request of an owner, as its owner's request in sp.
func (sp *rangeSpace) listed(w *waiter) {
	if sp.waiting == nil {
		sp.waiting = map[Owner]*waiter{}
	}
	sp.waiting[w.h.owner] = w
	w.listed = sp
}

// unlist takes w, which leaves the queue, out of sp's list of waiting owners; the waits of the
// others are checked again (recheckWaiting), since some may have passed a request through w.
func (sh *shard) unlist(sp *rangeSpace, w *waiter) {
	if sp.waiting[w.h.owner] == w {
		delete(sp.waiting, w.h.owner)
	}
	w.listed = nil
	if !sh.markRepass(sp) {
		sh.recheckWaiting(sp)
	}
}

// serveWaitingOwners serves the queues of the requests of the owners waiting in sp but new, which
// just queued: an owner's request can pass a request that waits for the owner through another
// owner's wait (waitsForOwner), so a new wait can let one of them through. A key's request that
// can now pass requests ahead of it in its key's queue is first moved ahead of them (repass).
// Only the requests of owners that held locks as they asked (flagOwnerHolds) pass any, so only
// theirs are served: a new wait lets nothing else through, and N Txns that hold nothing queued
// on one hot range do not serve each other's queues again at every wait.
func (sh *shard) serveWaitingOwners(sp *rangeSpace, added *waiter) {
	if sh.repass(sp) {
		sh.recheckWaiting(sp) // the requests passed wait for the mover now, a new edge
	}
	var others []*waiter // collected first: serving changes the list
	for _, u := range sp.waiting {
		if u != added && u.h.flags()&flagOwnerHolds != 0 {
			others = append(others, u)
		}
	}
	slices.SortFunc(others, func(a, b *waiter) int { return cmp.Compare(a.seq, b.seq) })
	for _, u := range others {
		switch {
		case u.left: // served meanwhile
		case u.space != nil:
			sh.serveRanges(sp, u.h.key(), u.h.cold.span.End, false)
		default:
			sh.serve(u.h.e)
		}
	}
}

// repass moves the key requests of the owners waiting in sp that hold locks ahead of the first
// request queued ahead of them for their key that they pass now, and reports whether one moved.
// A request passes another only if that one cannot be served before its owner lets go, and a new
// wait elsewhere can make it so after the request queued: it must not stay behind it then
// (docs/DESIGN.md §17.2). Oldest first, and from the start again after each move, since a move
// can let others pass in turn; each request moves at most once, so it ends (two requests that
// pass each other wait for each other, a cycle the wait-for graph finds).
func (sh *shard) repass(sp *rangeSpace) (moved bool) {
	var keyed []*waiter
	for _, u := range sp.waiting {
		if u.space == nil && u.upgrade == nil && !u.left && u.h.flags()&flagOwnerHolds != 0 {
			keyed = append(keyed, u)
		}
	}
	slices.SortFunc(keyed, func(a, b *waiter) int { return cmp.Compare(a.seq, b.seq) })
	for again := true; again; {
		again = false
		for i, u := range keyed {
			if u == nil {
				continue // moved already
			}
			sh.counts.repassTried++
			if before := sp.passPointOf(u); before != nil {
				sh.counts.repassed++
				sh.moveAhead(u.h.e, u, before)
				keyed[i] = nil
				moved, again = true, true
				break
			}
		}
	}
	return moved
}

// passPointOf returns the first request queued ahead of u in its key's queue that u passes, or
// nil; never one woken for the key, which takes it when it runs.
func (sp *rangeSpace) passPointOf(u *waiter) *waiter {
	for w := u.h.e.head; w != nil && w != u; w = w.next {
		if w.state == waitWoken {
			continue
		}
		if sp.passes(u.h, w) {
			return w
		}
	}
	return nil
}

// moveAhead relinks w, queued for e's key, right ahead of before, a request queued ahead of it,
// as enqueueAfter links a newcomer that passes before.
func (sh *shard) moveAhead(e *keyEntry, w, before *waiter) {
	unlink(e, w)
	if w.ownerHolds { // enqueueAfter counts it again
		w.ownerHolds = false
		e.ownersHolding--
	}
	w.exAhead, w.ownedAhead = nil, nil
	sh.enqueueAfter(e, w, before.prev)
}
