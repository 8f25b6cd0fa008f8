package locktable

import (
	"math"
	"time"
)

// waitState is where a waiter stands; it changes only under the shard mutex.
type waitState uint8

const (
	waitQueued     waitState = iota // in the queue, asleep
	waitWoken                       // the key was freed and this waiter was woken to take it
	waitGranted                     // the key was handed to this waiter directly
	waitTimedOut                    // Options.Timeout passed
	waitClosed                      // its Locker was closed
	waitCancelled                   // its ctx was done
	waitDeadlock                    // waiting would have closed a cycle of Txns
	waitShareEnded                  // an upgrade's share was released, lapsed or revoked
)

// waiter is a Lock call, or an upgrade, queued for a busy key. It exists only while the call
// waits. Its fields are guarded by the shard mutex.
type waiter struct {
	h          *Claim // the handle it becomes when granted; for an upgrade, a stand-in
	next, prev *waiter
	since      time.Duration // Mono of h's clock when it queued
	lease      time.Duration // the lease h gets when granted
	wake       chan struct{} // one buffered slot: a wake-up is never lost and never blocks
	// upgrade is the shared handle an upgrade request makes exclusive; nil for a Lock call.
	upgrade *Claim
	// exAhead is the nearest exclusive request (or upgrade) that was queued ahead of this one
	// when it queued, or one that has left the queue since (see exclusiveAhead).
	exAhead *waiter
	// ownedAhead, for an exclusive request of no owner, is the nearest exclusive request (or
	// upgrade) of an owner queued ahead of it, or one that has left the queue since (see
	// ownedExclusiveAhead): the shared requests behind it cannot pass that one either.
	ownedAhead *waiter
	state      waitState
	shared     bool // a shared request
	ownerHolds bool // its owner held other keys as it asked: counted in keyEntry.ownersHolding
	counted    bool // counted in Stats.Waiting
	left       bool // no longer in the queue
	// recheck asks the waiting owner to look for a cycle through it again: its edge to the
	// exclusive request ahead moved to another waiting owner (recheckBehind). checking is set
	// while that search runs, so that the table's probes do not count the wait as settled.
	recheck, checking bool
	// seq is the request's place in the order of arrival of its range space (rangegrant.go); 0
	// for one queued before its key was brought into the home shard, and for an upgrade.
	seq uint64
	// space is the column family of a queued range request; nil for a key's request.
	space *rangeSpace
	// listed is the range space whose waiting owners list this request, the
	// request of its owner there (rangeSpace.waiting); nil otherwise.
	listed *rangeSpace
	// runHead is, for a plain exclusive range request, the oldest request of the run of such
	// requests of its span it queued behind, found by the wait-for graph (rangeSpace.runHead).
	runHead *waiter
}

// mode reports what w asks for: a shared lock, or the upgrade of a shared lock its Txn holds.
func (w *waiter) mode() (shared, upgrade bool) { return w.shared, w.upgrade != nil }

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *waiter) finish(s waitState) {
	w.state = s
	w.h.w = nil
	w.signal()
}

// bargeable reports whether a newcomer may take e's free key before the oldest waiter, w (docs/
// DESIGN.md §6): only while w has waited less than bargeWindow, and only when no request queued
// for the key is of an owner that held other keys as it asked (flagOwnerHolds). Every wait for
// the keys such an owner holds waits for its request too, and a newcomer that took the key and
// then asked for one of them would close a cycle, lose it, and, retried at once, take the key
// again before that owner's turn. mono is a reading of c's clock.
func (e *keyEntry) bargeable(w *waiter, c *Tenant, mono time.Duration) bool {
	return e.ownersHolding == 0 && w.h.monoFor(c, mono)-w.since < bargeWindow
}

// enqueue appends w to e's wait queue.
func (sh *shard) enqueue(e *keyEntry, w *waiter) { sh.enqueueAfter(e, w, e.tail) }

// enqueueAfter links w into e's wait queue right behind after, or at its head when after is nil.
// Only a request that passes the ones behind it (rangepass.go) is linked anywhere but the tail;
// the requests it passes keep their record of the exclusive request ahead, and the wait graph,
// in a home shard where that happens, also reads the queue itself (rangegraph.go), so that their
// edge to w is not missed.
func (sh *shard) enqueueAfter(e *keyEntry, w, after *waiter) {
	if t := after; t != nil {
		if t.shared {
			w.exAhead, _ = e.exclusiveAhead(t)
		} else {
			w.exAhead = t
		}
		if !w.shared && w.h.owner == nil {
			w.ownedAhead, _ = e.ownedExclusiveAhead(w.exAhead)
		}
	}
	if w.h.flags()&flagOwnerHolds != 0 && e.ownersHolding < math.MaxUint16 {
		w.ownerHolds = true
		e.ownersHolding++
	}
	linkAfter(e, w, after)
}

// enqueueUpgrade puts w, an upgrade, ahead of every request queued for e's key but the upgrades
// queued before it.
func (sh *shard) enqueueUpgrade(e *keyEntry, w *waiter) {
	var after *waiter
	for x := e.head; x != nil && x.upgrade != nil; x = x.next {
		after = x
	}
	w.exAhead = after
	if w.h.owner == nil {
		w.ownedAhead, _ = e.ownedExclusiveAhead(after)
	}
	linkAfter(e, w, after)
}

// linkAfter links w into e's list of waiters right after after, or at the head for nil: unlink's
// inverse, with e's shard's mutex held.
func linkAfter(e *keyEntry, w, after *waiter) {
	w.prev = after
	if after != nil {
		w.next, after.next = after.next, w
	} else {
		w.next, e.head = e.head, w
	}
	if w.next != nil {
		w.next.prev = w
	} else {
		e.tail = w
	}
}

// exclusiveAhead returns the nearest exclusive request or upgrade queued ahead of w, or nil. The
// one recorded when w queued may have left since: it is skipped by following its own record, and
// the skip is remembered, so a run of shared requests costs a constant number of steps each.
// Upgrades queued since w are ahead of everything else, so with no exclusive request between,
// the last of them is the nearest.
// It also returns how many requests that had left it stepped over.
func (e *keyEntry) exclusiveAhead(w *waiter) (x *waiter, skipped int) {
	x = w.exAhead
	for x != nil && x.left {
		x = x.exAhead
		skipped++
	}
	w.exAhead = x
	if x == nil && w.upgrade == nil {
		for u := e.head; u != nil && u != w && u.upgrade != nil; u = u.next {
			x = u
		}
	}
	return x, skipped
}

// ownedExclusiveAhead returns x, an exclusive request or upgrade queued for e's key, or the
// nearest one of an owner queued ahead of it when x has none, or nil. Requests that have left are
// skipped by following their records, as exclusiveAhead does, and the result is remembered in
// the request of no owner it started from, so each is stepped over once. It also returns how
// many requests that had left it stepped over.
func (e *keyEntry) ownedExclusiveAhead(x *waiter) (o *waiter, skipped int) {
	from := x
	for x != nil && (x.left || x.h.owner == nil) {
		if x.left {
			skipped++
		}
		if x.h.owner == nil {
			x = x.ownedAhead
		} else {
			x = x.exAhead
		}
	}
	if from != nil && from != x && !from.left {
		from.ownedAhead = x
	}
	return x, skipped
}

// queued is how many requests are queued for e's key.
func (e *keyEntry) queued() int {
	n := 0
	for w := e.head; w != nil; w = w.next {
		n++
	}
	return n
}

// upgradeOf returns the upgrade queued for sharer h, or nil: left queued, it would wait for a
// share that is gone. Upgrades are queued ahead of every request but, in a home shard, those of
// owners that held locks as they asked, which alone pass one (rangepass.go). So the scan stops
// at the first other request: it reads the upgrades alone in a key shard, and in a home shard
// the run of upgrades and such requests at the head of the queue.
func (e *keyEntry) upgradeOf(h *Claim) *waiter {
	for w := e.head; w != nil && (w.upgrade != nil || e.space != nil && w.h.flags()&flagOwnerHolds != 0); w = w.next {
		if w.upgrade == h {
			return w
		}
	}
	return nil
}

// unlink takes w out of e's list of waiters, with e's shard's mutex held, and nothing else:
// dequeue and moveAhead keep the counts.
func unlink(e *keyEntry, w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		e.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		e.tail = w.prev
	}
	w.next, w.prev = nil, nil
}

// dequeue unlinks w from e's wait queue.
func (sh *shard) dequeue(e *keyEntry, w *waiter) {
	unlink(e, w)
	w.left = true
	if w.listed != nil {
		sh.unlist(w.listed, w)
	}
	if w.ownerHolds {
		e.ownersHolding--
	}
	if w.state == waitWoken {
		e.wakePending = false
	}
	if w.counted {
		w.counted = false
		sh.counts.waiting--
	}
}

// recheckBehind is called when left, an exclusive request or upgrade, leaves e's queue without
// being granted; behind is the request that was queued right behind it. If left was a Txn's, the
// shared requests after it, up to the next exclusive request of a Txn, waited for it (past
// requests of no owner in between, which cannot pass it either); their edge now moves to the
// nearest exclusive request further ahead, or, past one of no owner, to the key's holders too.
// Those may be waiting Txns, and the moved edge may keep alive a cycle that ran through the
// request that left (a deadlock's victim, whose departure was to break it) or close a new one
// (docs/DESIGN.md §13). So each of those Txns is woken to check its wait again. When left had no
// owner, the requests behind it lose their edges to the holders, if no other request of no owner
// stands ahead, and gain none: no cycle can close.
func (sh *shard) recheckBehind(e *keyEntry, left, behind *waiter) {
	if left.h.owner == nil {
		return
	}
	for behind != nil && behind.upgrade != nil {
		behind = behind.next
	}
	for s := behind; s != nil && (s.shared || s.h.owner == nil); s = s.next {
		if !s.shared || s.h.owner == nil || s.recheck {
			continue
		}
		if x, _ := e.exclusiveAhead(s); x == nil {
			continue // the edge now goes to no request
		}
		s.recheck = true
		s.signal()
	}
}

// countWaiting counts w, queued with its timers armed, in Stats.Waiting.
func (sh *shard) countWaiting(w *waiter) {
	w.counted = true
	sh.counts.waiting++
}

// abandon removes a waiter that gives up (timeout, ctx, Close, deadlock) and serves the key's
// queue: it may have been the one woken for the key, or held up requests behind it.
func (sh *shard) abandon(w *waiter, outcome waitState) {
	if sp := w.space; sp != nil {
		sh.dropRange(w, outcome)
		sh.serveAfterRange(sp, w.h.key(), w.h.cold.span.End)
		return
	}
	e := w.h.e
	sh.drop(w, outcome)
	sh.serve(e)
}

// drop takes w out of the queue with the given outcome, without serving the queue.
func (sh *shard) drop(w *waiter, outcome waitState) {
	if w.space != nil {
		sh.dropRange(w, outcome)
		return
	}
	e := w.h.e
	behind := w.next
	sh.dequeue(e, w)
	if !w.shared {
		sh.recheckBehind(e, w, behind)
	}
	w.h.e = nil
	sh.unschedule(w.h)
	if w.h.flags()&flagCounted != 0 {
		w.h.uncount()
	}
	w.finish(outcome)
	sh.countOutcome(outcome)
}

// countOutcome counts a wait that ended ungranted.
func (sh *shard) countOutcome(outcome waitState) {
	switch outcome {
	case waitTimedOut:
		sh.counts.timeouts++
	case waitCancelled:
		sh.counts.canceled++
	case waitDeadlock:
		sh.counts.deadlocks++
	}
}
