package locktable

import "time"

// The grant rule: what a newcomer takes at once, and what the head of a queue is given when its
// key frees up (docs/DESIGN.md §15.2).

// bargeWindow is how long the oldest waiter of a freed key may be passed over by newcomers; past
// it, the key is handed to that waiter directly.
const bargeWindow = time.Millisecond

// admits reports whether a newcomer's request for h, made at mono on c's clock, takes e's key at
// once (docs/DESIGN.md §15.2): a shared one if nothing is queued and the key is free or held
// shared; an exclusive one if the key is free and nothing is queued, or its oldest waiter was
// woken for it and may still be passed (keyEntry.bargeable). In a home shard a key can be free
// with its oldest waiter not woken, kept from it by a range; no newcomer passes that one.
func (e *keyEntry) admits(h *Claim, c *Tenant, mono time.Duration) bool {
	if h.flags()&flagShared != 0 {
		return e.head == nil && (e.holder == nil || e.shares > 0)
	}
	return e.holder == nil && (e.head == nil || e.wakePending && e.bargeable(e.head, c, mono))
}

// serve serves e's queue and, in a home shard, the range requests its key may have held up.
func (sh *shard) serve(e *keyEntry) {
	sp, keyClaim := e.space, e.keyClaim
	sh.serveKey(e) // may take e out of the table
	if sp != nil {
		e.rekey()
		sh.keyChanged(sp, keyClaim.key())
	}
}

// rekey makes e, an entry of a home shard still in the table, keep a claim that is on it, once
// the one it kept has left the key: a claim given back is not kept alive, with its tenant and
// owner, by a key that others go on holding. Every claim of the key has the same key, so the
// entry's place in its space's index stays.
func (e *keyEntry) rekey() {
	if e.space != nil && e.keyClaim.e != e {
		e.keyClaim = e.firstClaim()
	}
}

// keyChanged serves the queued range requests of a range space whose key's
// holders or queue changed, if one of them covers the key: only then can the change let one
// through.
func (sh *shard) keyChanged(sp *rangeSpace, key []byte) {
	if sp.queuedOver(key) {
		sh.serveRanges(sp, key, nil, true)
	}
}

// rangeKeeps reports whether, in a home shard, a range keeps w, queued for e's key, from it.
func (sh *shard) rangeKeeps(e *keyEntry, w *waiter, c *Tenant) bool {
	return e.space != nil && e.space.keyBlocked(sh, w.h, w.seq, false, c, 0)
}

// serveKey grants what the head of e's queue can have now (docs/DESIGN.md §15.2): an upgrade whose
// share is the only one left, or while the key is free or held shared, the shared requests at
// the head up to the next exclusive one, together; or, while the key is free, the oldest
// exclusive request, directly once it may not be passed (keyEntry.bargeable: it has waited
// bargeWindow, or a request queued is of an owner that holds other keys), and before that woken
// to compete with newcomers. Nothing else is woken. Waiters of a closed Locker are failed, never
// granted. A key with neither holder nor waiters leaves the table.
func (sh *shard) serveKey(e *keyEntry) {
	for !e.wakePending {
		w := e.head
		if w == nil {
			if e.holder == nil {
				sh.remove(e) // in a home shard, out of its space's index too
			}
			return
		}
		c := w.h.ten
		if c.closed.Load() {
			sh.drop(w, waitClosed)
			continue
		}
		switch {
		case w.upgrade != nil:
			up := w.upgrade
			switch {
			case up.dead():
				sh.drop(w, waitShareEnded) // its share ended inside a Fence and is still held
				continue
			case e.shares != 1 || up.lapsed():
				return // other shares are left, or its own lapse is about to fail it
			case sh.rangeKeeps(e, w, c):
				return
			}
			sh.dequeue(e, w)
			sh.unschedule(w.h)
			e.shares = 0
			up.clearFlags(flagShared) // not a new grant: Acquired and Contended do not count it
			w.finish(waitGranted)
			return
		case w.shared:
			if e.heldExclusively() {
				return
			}
			if !sh.grantShared(e) {
				return // a range keeps the head from the key
			}
		default:
			if e.holder != nil || sh.rangeKeeps(e, w, c) {
				return
			}
			wall, mono := ReadClock(c.clock)
			if !e.bargeable(w, c, mono) {
				sh.unqueueGranted(e, w, mono)
				sh.grantKey(e, w.h, wall, mono, w.lease, e.head != nil || e.rangeWaitsOver())
				w.finish(waitGranted)
				return
			}
			e.wakePending = true
			w.state = waitWoken
			w.signal()
			return
		}
	}
}

// grantShared grants the shared requests at the head of e's queue, up to the next exclusive
// one, and reports whether it granted them all. In a home shard a range can keep one of them from
// the key; the others, which do not conflict with it, are granted unless a range keeps them too
// (docs/DESIGN.md §17.2). Their deadlines are watched when a request stays queued behind them.
func (sh *shard) grantShared(e *keyEntry) (served bool) {
	end := e.head
	for end != nil && end.shared {
		end = end.next
	}
	served = true
	for w := e.head; w != end; {
		next := w.next
		c := w.h.ten
		switch {
		case c.closed.Load():
			sh.drop(w, waitClosed)
		case sh.rangeKeeps(e, w, c):
			served = false
		default:
			wall, mono := ReadClock(c.clock)
			sh.unqueueGranted(e, w, mono)
			sh.grantKey(e, w.h, wall, mono, w.lease, end != nil || e.rangeWaitsOver())
			w.finish(waitGranted)
		}
		w = next
	}
	return served
}
