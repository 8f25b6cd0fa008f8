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
// woken for it and may still be passed (keyEntry.bargeable).
func (e *keyEntry) admits(h *Hold, c *Tenant, mono time.Duration) bool {
	if h.flags()&FlagShared != 0 {
		return e.head == nil && (e.holder == nil || e.shares > 0)
	}
	return e.holder == nil && (e.head == nil || e.bargeable(e.head, c, mono))
}

// serve grants what the head of e's queue can have now (docs/DESIGN.md §15.2): an upgrade whose
// share is the only one left, or while the key is free or held shared, the shared requests at
// the head up to the next exclusive one, together; or, while the key is free, the oldest
// exclusive request, directly once it may not be passed (keyEntry.bargeable: it has waited
// bargeWindow, or a request queued is of an owner that holds other keys), and before that woken
// to compete with newcomers. Nothing else is woken. Waiters of a closed Locker are failed, never
// granted. A key with neither holder nor waiters leaves the table.
func (sh *shard) serve(e *keyEntry) {
	for !e.wakePending {
		w := e.head
		if w == nil {
			if e.holder == nil {
				sh.remove(e)
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
			case up.Dead():
				sh.drop(w, waitShareEnded) // its share ended inside a Fence and is still held
				continue
			case e.shares != 1 || up.Lapsed():
				return // other shares are left, or its own lapse is about to fail it
			}
			sh.dequeue(e, w)
			sh.unschedule(w.h)
			e.shares = 0
			up.ClearFlags(FlagShared) // not a new grant: Acquired and Contended do not count it
			w.finish(waitGranted)
			return
		case w.shared:
			if e.heldExclusively() {
				return
			}
			sh.grantShared(e)
		default:
			if e.holder != nil {
				return
			}
			wall, mono := ReadClock(c.clock)
			if !e.bargeable(w, c, mono) {
				sh.unqueueGranted(e, w, mono)
				sh.grant(e, w.h, wall, mono, w.lease, e.head != nil)
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
// one. Their deadlines are watched when a request stays queued behind them.
func (sh *shard) grantShared(e *keyEntry) {
	end := e.head
	for end != nil && end.shared {
		end = end.next
	}
	for w := e.head; w != end; w = e.head {
		c := w.h.ten
		if c.closed.Load() {
			sh.drop(w, waitClosed)
			continue
		}
		wall, mono := ReadClock(c.clock)
		sh.unqueueGranted(e, w, mono)
		sh.grant(e, w.h, wall, mono, w.lease, end != nil)
		w.finish(waitGranted)
	}
}
