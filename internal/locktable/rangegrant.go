package locktable

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// The grant rule in a range space (docs/DESIGN.md §17): two locks conflict when
// their key sets meet and one is exclusive, unless one owner holds both; a request is served after
// every conflicting request queued before it (sp.seq orders them) and never waits for one it does
// not conflict with. Key requests keep the rule of their key (grant.go) and, on top of it, wait
// for the ranges that cover their key. Everything here runs under the home shard's mutex.

// newest is a newcomer's place in the order of arrival: after every queued request.
const newest = ^uint64(0)

// conflicts reports whether a and b, locks or requests whose key sets meet, conflict.
func conflicts(a, b *Hold) bool {
	if a == b || a.owner != nil && a.owner == b.owner {
		return false
	}
	return a.flags()&FlagShared == 0 || b.flags()&FlagShared == 0
}

// keyBlocked reports whether a range keeps h, a key's request placed seq in the order of
// arrival, from its key: a conflicting range lock, or a conflicting range request queued before
// it. With settle, a conflicting range lock whose lease lapsed at mono (a reading of c's clock) is
// settled first, as a newcomer settles a key's lapsed holders; without, a lapsed range blocks
// until its timer settles it, so that serving a key never ends another lease under it.
func (sp *rangeSpace) keyBlocked(sh *shard, h *Hold, seq uint64, settle bool, c *Tenant, mono time.Duration) bool {
	if sp.ranges.n == 0 || sh.tab.modes.noConflicts.Load() || !sp.ranges.mayConflict(h.key(), h.flags()&FlagShared != 0) {
		return false
	}
	if settle {
		for _, x := range sp.lapsedRanges(h, c, mono, nil) {
			x.endIfLapsed(sh, c, mono)
		}
	}
	return sp.rangesBlock(h, seq)
}

// rangeBlocked reports whether h, a range request placed seq in the order of arrival, must wait:
// a conflicting holder of a key or range inside or across it, or a conflicting request queued
// before it. settle is as for keyBlocked.
func (sp *rangeSpace) rangeBlocked(sh *shard, h *Hold, seq uint64, settle bool, c *Tenant, mono time.Duration) bool {
	if sh.tab.modes.noConflicts.Load() {
		return false
	}
	start, end := h.key(), h.cold.span.end
	if settle {
		var lapsed, holders []*Hold
		sp.keysIn(start, end, func(e *keyEntry) bool {
			holders = e.appendHolders(holders[:0])
			for _, x := range holders {
				if conflicts(h, x) && x.lapsedFor(c, mono) {
					lapsed = append(lapsed, x)
				}
			}
			return true
		})
		for _, x := range sp.lapsedRanges(h, c, mono, lapsed) {
			x.endIfLapsed(sh, c, mono)
		}
	}
	blocked := false
	sp.keysIn(start, end, func(e *keyEntry) bool {
		blocked = sp.keyBlocksRange(e, h, seq)
		return !blocked
	})
	return blocked || sp.rangesBlock(h, seq)
}

// rangesBlock reports whether a range lock or request of sp keeps h, a request placed seq in the
// order of arrival, waiting (rangeItem.blocks), but for a request h passes (rangepass.go).
func (sp *rangeSpace) rangesBlock(h *Hold, seq uint64) bool {
	blocked := false
	sp.ranges.heldConflicting(h, func(it *rangeItem) bool {
		blocked = conflicts(h, it.h)
		return !blocked
	})
	if blocked {
		return true
	}
	sp.ranges.queuedOver(h, func(it *rangeItem) bool {
		blocked = it.blocks(h, seq) && !sp.passes(h, it.w)
		return !blocked
	})
	return blocked
}

// blocks reports whether it, a range lock or request that meets the key set of h, a request
// placed seq in the order of arrival, keeps h waiting: it conflicts with h, and is a lock or a
// request queued before h.
func (it *rangeItem) blocks(h *Hold, seq uint64) bool {
	return (it.w == nil || it.w.seq < seq) && conflicts(h, it.h)
}

// lapsedRanges appends to lapsed the range locks of sp that meet h's key set, conflict with it,
// and whose lease lapsed at mono (a reading of c's clock) but is not ended yet, and returns it.
// They are collected first: ending one serves what it held up, which can change the tree.
func (sp *rangeSpace) lapsedRanges(h *Hold, c *Tenant, mono time.Duration, lapsed []*Hold) []*Hold {
	sp.ranges.heldConflicting(h, func(it *rangeItem) bool {
		if conflicts(h, it.h) && it.h.lapsedFor(c, mono) {
			lapsed = append(lapsed, it.h)
		}
		return true
	})
	return lapsed
}

// keyBlocksRange reports whether e's key keeps h, a range request over it placed seq in the
// order of arrival, waiting: a conflicting holder, or a conflicting request queued before it that
// h does not pass (rangepass.go).
func (sp *rangeSpace) keyBlocksRange(e *keyEntry, h *Hold, seq uint64) bool {
	if e.holder != nil {
		if conflicts(h, e.holder) {
			return true
		}
		for _, x := range e.sharers {
			if conflicts(h, x) {
				return true
			}
		}
	}
	for w := e.head; w != nil; w = w.next {
		if w.seq < seq && conflicts(h, w.h) && !sp.passes(h, w) {
			return true
		}
	}
	return false
}

// keysIn calls f on the entries of the keys in [start, end) (end nil: no bound), in key order,
// until f returns false.
func (sp *rangeSpace) keysIn(start, end []byte, f func(*keyEntry) bool) {
	each := func(rk *rangedKey) bool { return f(rk.e) }
	from := &rangedKey{key: start}
	if end == nil {
		sp.keys.AscendGreaterOrEqual(from, each)
		return
	}
	sp.keys.AscendRange(from, &rangedKey{key: end}, each)
}

// newRangedEntry adds an entry for h's key, which a live span covers, to the home shard.
func (sh *shard) newRangedEntry(sp *rangeSpace, h *Hold) *keyEntry {
	e := sh.newEntry(h.hash)
	// The hold's key never changes, and the slice keeps it alive for as long as the entry needs it.
	rk := &rangedKey{key: h.key(), space: sp, e: e}
	e.setRanged(rk)
	sh.index.insert(e)
	sp.keys.ReplaceOrInsert(rk)
	return e
}

// acquireRange is Acquire of a range hold. Its span goes into the cover first, then the keys
// inside it that are still in their own shards are brought into the home shard (bringIn), unless
// the span of a range whose keys are all in already holds all of it (broughtIn); only then is the
// request placed among the others, in the order of arrival, as a request that arrives then.
func (h *Hold) acquireRange(ctx context.Context, lease, timeout time.Duration, wait, ctxBounds bool) (time.Duration, error) {
	c := h.ten
	if c.closed.Load() {
		return 0, ErrClosed
	}
	sp := c.tab.spaceFor(h.cf)
	sh := sp.home
	h.hash = routed(c.tab.hash(h.cf, h.key()), sp.homeIdx)
	sh.mu.Lock()
	if c.closed.Load() {
		sh.mu.Unlock()
		return 0, ErrClosed
	}
	it := &h.cold.span.item
	it.id = sp.nextSeq()
	start, end := h.key(), h.cold.span.end
	inside := sp.broughtIn.holdsSpan(start, end)
	sp.coverAdd(it)
	if !inside {
		sh.mu.Unlock()
		sp.bringIn(c.tab, h.cf, start, end)
		sh.mu.Lock()
		if c.closed.Load() {
			sp.spanGone(it)
			sh.unlockAndRunDeferred()
			return 0, ErrClosed
		}
	}
	sp.broughtIn = coverWith(sp.broughtIn, start, end, it.id)
	wall, mono := ReadClock(c.clock)
	if !sp.rangeBlocked(sh, h, newest, true, c, mono) {
		sh.grantRange(sp, it, wall, mono, lease)
		sh.unlockAndRunDeferred()
		return mono, nil
	}
	if !wait {
		sp.spanGone(it)
		sh.unlockAndRunDeferred()
		return 0, ErrLocked
	}
	w := &waiter{h: h, since: mono, lease: lease, wake: make(chan struct{}, 1), shared: h.flags()&FlagShared != 0, space: sp}
	it.w, w.seq = w, sp.nextSeq()
	sp.ranges.insert(it)
	sp.queue = append(sp.queue, it)
	return mono, sh.sleep(ctx, nil, w, MonoAfter(mono, WaitBound(ctx, timeout, ctxBounds)))
}

// grantRange makes it's hold a holder of its range, with a lease of lease from the readings wall
// and mono of its clock. A range's deadline is always on a timer: requests for keys inside it
// can queue without looking at it again.
func (sh *shard) grantRange(sp *rangeSpace, it *rangeItem, wall int64, mono, lease time.Duration) {
	h := it.h
	it.w = nil
	if it.inTree {
		sp.ranges.refile(it) // from the queued requests to the locks held
	} else {
		sp.ranges.insert(it)
	}
	h.e = nil
	h.acquiredAt = sh.tab.stamps.Mint(wall)
	h.expiresAt = wall + int64(lease)
	h.deadline.Store(int64(MonoAfter(mono, lease)))
	h.state.Store(h.flags() | FlagHeld)
	sh.acquired++
	sh.held++
	sh.schedule(h)
}

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
	collect := func(it *rangeItem) bool {
		batch = append(batch, it)
		return true
	}
	if point {
		sp.ranges.queued.containing(start, collect)
	} else {
		sp.ranges.queued.meeting(start, end, collect)
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
		sp.ranges.tried++
		c := w.h.ten
		if c.closed.Load() {
			sh.dropRange(w, waitClosed)
			sh.serveAfterRange(sp, it.start(), it.end())
			continue
		}
		if up := w.upgrade; up != nil && up.Dead() {
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

// served takes rk out of its space's index if serving its entry took the entry out of the table
// (serveKey does exactly when the key has neither holder nor waiter).
func (rk *rangedKey) served() {
	if rk.e.holder == nil && rk.e.head == nil {
		sp := rk.space
		sp.keys.Delete(rk)
		if rk.retired != nil {
			sp.orphanLeft(rk)
		}
	}
}

// queuedOver reports whether a range request queued in sp covers key: only then can a change
// to key's holders or queue let one through.
func (sp *rangeSpace) queuedOver(key []byte) bool {
	if len(sp.queue) == 0 {
		return false
	}
	return sp.ranges.queued.containsAny(key)
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
	w.finish(outcome)
	sh.countOutcome(outcome)
}

// giveBackRange is giveBack of a range hold whose flags are f.
func (sh *shard) giveBackRange(h *Hold, f, set uint32) {
	it := &h.cold.span.item
	if f&FlagHeld == 0 || !it.inTree || it.w != nil {
		h.SetFlags(set)
		sh.tab.logFault(h.ten, "a handle gave back a range it did not hold")
		return
	}
	sp := sh.spaces[h.cf]
	sp.ranges.remove(it)
	sp.spanGone(it)
	h.state.Store(f&^FlagHeld | set)
	if w := sp.upgradeOfRange(h); w != nil {
		sh.dropRange(w, waitShareEnded)
	}
	sh.held--
	sh.ownerLetGo(h)
	sh.serveAfterRange(sp, h.key(), h.cold.span.end)
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
		rk := e.ranged()
		sh.serveKey(e)
		rk.served()
	}
	sh.serveRanges(sp, start, end, false)
}

// watchSpan watches the holders of the keys inside h's range, for a range request that queues
// (range locks are always watched), and tells them and the range locks it meets that a request
// waits for them (tellHolders).
func (sh *shard) watchSpan(sp *rangeSpace, h *Hold) {
	sp.keysIn(h.key(), h.cold.span.end, func(e *keyEntry) bool {
		sh.watchHolders(e)
		sh.tellHolders(e)
		return true
	})
	for _, t := range []*rangeTree{&sp.ranges.shared, &sp.ranges.exclusive} {
		t.meeting(h.key(), h.cold.span.end, func(it *rangeItem) bool {
			sh.tellHolder(it.h)
			return true
		})
	}
}

// rangeWaitsOver reports whether, in a home shard, a range request over e's key is queued: a
// holder the key's queue is granted then must be watched, since that request may wait for it to
// lapse as well (range requests watch only the holders there when they queue, watchSpan).
func (e *keyEntry) rangeWaitsOver() bool {
	rk := e.ranged()
	return rk != nil && rk.space.queuedOver(rk.key)
}
