package locktable

import "time"

// A key given back by its holder, lapsed or revoked, and the holders a closing tenant leaves:
// each serves the key's queue again.

// giveBack ends h's holding of its key, setting the flags in set with the same store, and serves
// the key's queue. A counted claim gives its room in its tenant's bound back with the key.
func (sh *shard) giveBack(h *Claim, set uint32) {
	e := h.e
	f := h.flags()
	if f&(flagShared|flagRange|flagInHomeShard) != 0 {
		switch {
		case f&flagCounted != 0:
			sh.giveBackCounted(h, set)
		case f&flagRange != 0:
			sh.giveBackRangeClaim(h, f, set)
		case f&flagShared != 0:
			sh.giveBackShare(h, e, f, set)
		default:
			sh.giveBackInHomeShard(h, e, f, set)
		}
		return
	}
	if e == nil || e.holder != h {
		if f&flagCounted != 0 {
			sh.giveBackCounted(h, set)
			return
		}
		h.setFlags(set)
		sh.tab.logFault(h.ten, "a handle gave back a key it did not hold")
		return
	}
	sh.dropHolder(h, e, f&^flagHeld, set)
	if f&flagCounted != 0 { // written out: every Release runs this, and a call would cost it
		h.clearFlags(flagCounted)
		h.ten.bound.used.Add(-1)
	}
	sh.serveKey(e) // not serve: the key is not in a home shard (flagInHomeShard)
}

// giveBackInHomeShard is giveBack of h, whose flags are f, as the exclusive holder of a key in a
// range space's home shard: serving the key there also serves the range requests it held up
// (serve, not serveKey), and the waits that passed a request because of h's owner are checked
// again (ownerLetGo).
func (sh *shard) giveBackInHomeShard(h *Claim, e *keyEntry, f, set uint32) {
	if e == nil || e.holder != h {
		h.setFlags(set)
		sh.tab.logFault(h.ten, "a handle gave back a key it did not hold")
		return
	}
	sh.dropHolder(h, e, f&^flagHeld, set)
	sh.ownerLetGo(h)
	sh.serve(e)
}

// dropHolder ends h's exclusive holding of e: h's flags become kept (its flags without flagHeld)
// with the flags in set added, in one store. Serving e's queue is the caller's.
func (sh *shard) dropHolder(h *Claim, e *keyEntry, kept, set uint32) {
	h.state.Store(kept | set)
	h.e = nil // the entry may be reused once the key leaves the table
	e.holder = nil
	sh.held--
}

// giveBackShare is giveBack of a sharer, whose flags are f. An upgrade waiting on the share
// fails.
func (sh *shard) giveBackShare(h *Claim, e *keyEntry, f, set uint32) {
	p := -1
	if e != nil {
		p = e.placeOf(h)
	}
	if p < 0 {
		h.setFlags(set)
		sh.tab.logFault(h.ten, "a handle gave back a share it did not hold")
		return
	}
	h.state.Store(f&^flagHeld | set)
	h.e = nil
	e.removeSharerAt(h, p)
	if w := e.upgradeOf(h); w != nil {
		sh.drop(w, waitShareEnded)
	}
	sh.held--
	if e.space == nil {
		sh.serveKey(e) // not serve: the key is not in a home shard
		return
	}
	sh.ownerLetGo(h)
	sh.serve(e)
}

// expire ends h's lease: it stops authorizing writes at once, and the key passes on now or, when
// h is inside Fence, as soon as the commit returns.
func (sh *shard) expire(h *Claim) {
	if h.flags()&flagExpired != 0 {
		return
	}
	h.setFlags(flagExpired)
	sh.unschedule(h)
	h.closeDone()
	if h.flags()&(flagHeld|flagReleased) != flagHeld {
		return // gone, or released by its own fence's commit, which passes the key on
	}
	sh.counts.lapsed++
	sh.noteLapse(h)
	if h.flags()&flagFencing != 0 {
		h.setFlags(flagPassOnAfterFence)
		return
	}
	sh.giveBack(h, 0)
	sh.deferHook(h)
}

// unqueueGranted takes w, about to be granted its key at mono (a reading of its Locker's clock),
// out of e's queue and off its timer, and counts its wait.
func (sh *shard) unqueueGranted(e *keyEntry, w *waiter, mono time.Duration) {
	sh.dequeue(e, w)
	sh.unschedule(w.h)
	sh.counts.contended++
	sh.counts.waitTime += mono - w.since
}

// evict fails c's queued waiters with ErrClosed and appends the handles of c holding a key here
// to held.
func (sh *shard) evict(c *Tenant, held []*Claim) []*Claim {
	// Collect first: failing a waiter can pass its key on or take its entry out of the index.
	var entries []*keyEntry
	sh.index.all(func(e *keyEntry) { entries = append(entries, e) })
	var holders []*Claim
	for _, e := range entries {
		holders = e.appendHolders(holders[:0])
		for _, h := range holders {
			if h.ten == c {
				held = append(held, h)
			}
		}
		var mine []*waiter
		for w := e.head; w != nil; w = w.next {
			if w.h.ten == c {
				mine = append(mine, w)
			}
		}
		for _, w := range mine {
			if w.h.w == w { // still queued: serving the key may have failed it already
				sh.abandon(w, waitClosed)
			}
		}
	}
	return sh.evictRanges(c, held)
}
