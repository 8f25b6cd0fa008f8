package locktable

import (
	"cmp"
	"slices"
)

// Going over a range space's queues again (docs/DESIGN.md §17.2): a request that passes another
// is moved ahead of it when a new wait, a lock let go or a request that left makes it pass one it
// queued behind, and the waits that may change are checked again. Everything here runs under the
// home shard's mutex.

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
		sp = e.space
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
			sh.counts.repassTried.Inc()
			if before := sp.passPointOf(u); before != nil {
				sh.counts.repassed.Inc()
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
