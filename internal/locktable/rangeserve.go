package locktable

import (
	"cmp"
	"slices"
	"time"
)

// Serving range requests, and a range leaving (docs/DESIGN.md §17.2): what a change to a key or
// a range lets through, and how a range request or lock leaves its space.

// serveRanges grants, oldest first, the queued range requests of sp that meet [start, end) (end
// nil: no bound), or with point the key start, and that nothing keeps waiting any more: a change
// to the holders or the queue there can let through only those, and a request granted holds up
// the ones behind it rather than let them through. A call made while it runs (settling or serving
// a key can come back here) asks it to go over the whole queue once more instead.
func (sh *shard) serveRanges(sp *rangeSpace, start, end []byte, point bool) {
	if len(sp.queue) == 0 {
		return
	}
	if sp.serving {
		sp.again = true
		return
	}
	sp.serving = true
	var batch []*rangeItem
	collect := func(y *Claim) bool {
		batch = append(batch, itemOf(y))
		return true
	}
	if point {
		sp.ranges.queued.Containing(start, collect)
	} else {
		sp.ranges.queued.Meeting(start, end, collect)
	}
	slices.SortFunc(batch, func(a, b *rangeItem) int { return cmp.Compare(a.w.seq, b.w.seq) })
	sh.serveQueuedRanges(sp, batch)
	for sp.again {
		sp.again = false
		sh.serveQueuedRanges(sp, append(batch[:0], sp.queue...))
	}
	sp.serving = false
}

// serveQueuedRanges grants the queued range requests of batch, in its order, that nothing keeps
// waiting any more; one that left the queue meanwhile is skipped.
func (sh *shard) serveQueuedRanges(sp *rangeSpace, batch []*rangeItem) {
	for _, it := range batch {
		w := it.w
		if w == nil {
			continue // granted or dropped since the batch was made
		}
		sp.ranges.tried.Inc()
		c := w.h.ten
		if c.closed.Load() {
			sh.dropRange(w, waitClosed)
			sh.serveAfterRange(sp, it.start(), it.end())
			continue
		}
		if up := w.upgrade; up != nil && up.dead() {
			sh.dropRange(w, waitShareEnded)
			sh.serveAfterRange(sp, it.start(), it.end())
			continue
		}
		wall, mono := ReadClock(c.clock)
		if sp.rangeBlocked(sh, w.h, w.seq, false, c, mono) {
			continue
		}
		if w.upgrade != nil {
			sh.finishRangeUpgrade(sp, it, mono)
			continue
		}
		sh.unqueueGrantedRange(sp, it, mono)
		sh.grantRange(sp, it, wall, mono, w.lease)
		w.finish(waitGranted)
	}
}

// queuedOver reports whether a range request queued in sp covers key: only then can a change
// to key's holders or queue let one through.
func (sp *rangeSpace) queuedOver(key []byte) bool {
	if len(sp.queue) == 0 {
		return false
	}
	return sp.ranges.queued.Covers(key)
}

// unlinkQueued takes it out of sp's queue of range requests; it stays in the tree.
func (sp *rangeSpace) unlinkQueued(sh *shard, it *rangeItem) {
	for i, x := range sp.queue {
		if x == it {
			copy(sp.queue[i:], sp.queue[i+1:])
			sp.queue[len(sp.queue)-1] = nil
			sp.queue = sp.queue[:len(sp.queue)-1]
			break
		}
	}
	w := it.w
	w.left = true
	if w.listed != nil {
		sh.unlist(sp, w)
	}
	if w.counted {
		w.counted = false
		sh.counts.waiting--
	}
}

// unqueueGrantedRange takes it, a queued range request about to be granted at mono (a reading of
// its Locker's clock), out of sp's queue and off its timer, and counts its wait (unqueueGranted).
func (sh *shard) unqueueGrantedRange(sp *rangeSpace, it *rangeItem, mono time.Duration) {
	w := it.w
	sp.unlinkQueued(sh, it)
	sh.unschedule(w.h)
	sh.counts.contended++
	sh.counts.waitTime += mono - w.since
}

// dropRange takes w, a queued range request, out of the queue with the given outcome, without
// serving what it held up.
func (sh *shard) dropRange(w *waiter, outcome waitState) {
	sp := w.space
	it := &w.h.cold.span.item
	sp.unlinkQueued(sh, it)
	sp.ranges.remove(it)
	sp.spanGone(it)
	it.w = nil
	sh.unschedule(w.h)
	if w.h.flags()&flagCounted != 0 {
		w.h.uncount()
	}
	w.finish(outcome)
	sh.countOutcome(outcome)
}

// giveBackRangeClaim is giveBack of a range claim, a range lock rather than a key's, whose flags
// are f.
func (sh *shard) giveBackRangeClaim(h *Claim, f, set uint32) {
	it := &h.cold.span.item
	if f&flagHeld == 0 || it.in == inNone || it.w != nil {
		h.setFlags(set)
		sh.tab.logFault(h.ten, "a handle gave back a range it did not hold")
		return
	}
	// Marked before its span leaves the cover: a key request reads the cover without the home
	// shard's mutex and, once the span is gone, takes a key inside it in its own shard at once;
	// by then IsExpired, which reads these flags without a mutex too, must report the range dead.
	h.state.Store(f&^flagHeld | set)
	sp := sh.spaces[h.cf]
	sp.ranges.remove(it)
	sp.spanGone(it)
	if w := sp.upgradeOfRange(h); w != nil {
		sh.dropRange(w, waitShareEnded)
	}
	sh.held--
	sh.ownerLetGo(h)
	sh.serveAfterRange(sp, h.key(), h.cold.span.End)
}

// serveAfterRange serves what a range lock or request over [start, end) that left may have held
// up: the queues of the keys inside it, and the queued ranges.
func (sh *shard) serveAfterRange(sp *rangeSpace, start, end []byte) {
	var waited []*keyEntry // collected first: serving a key can take its entry out
	sp.keysIn(start, end, func(e *keyEntry) bool {
		if e.head != nil {
			waited = append(waited, e)
		}
		return true
	})
	for _, e := range waited {
		sh.serveKey(e)
		e.rekey()
	}
	sh.serveRanges(sp, start, end, false)
}

// rangeWaitsOver reports whether, in a home shard, a range request over e's key is queued: a
// holder the key's queue is granted then must be watched, since that request may wait for it to
// lapse as well (range requests watch only the holders there when they queue, watchSpan).
func (e *keyEntry) rangeWaitsOver() bool {
	return e.space != nil && e.space.queuedOver(e.homeKey())
}
