package locktable

// What the table's views, probes and Shutdown see of range locks: each is read in its column
// family's home shard, with that shard's keys.

// evictRanges is evict for the range locks and requests of c in the shard's spaces.
func (sh *shard) evictRanges(c *Tenant, held []*Hold) []*Hold {
	for _, sp := range sh.spaces {
		var mine []*waiter
		sp.ranges.meeting(nil, nil, func(it *rangeItem) bool {
			switch {
			case it.h.ten != c:
			case it.w == nil:
				held = append(held, it.h)
			default:
				mine = append(mine, it.w)
			}
			return true
		})
		for _, w := range mine {
			if w.h.w == w {
				sh.abandon(w, waitClosed)
			}
		}
	}
	return held
}

// rangeWaiters counts the queued requests that conflict with h, a range lock of sp: those for
// keys inside it, and range requests over it.
func (sp *rangeSpace) rangeWaiters(h *Hold) (n, read int) {
	sp.keysIn(h.key(), h.cold.span.end, func(e *keyEntry) bool {
		for w := e.head; w != nil; w = w.next {
			read++
			if conflicts(h, w.h) {
				n++
			}
		}
		return true
	})
	sp.ranges.queuedOver(h, func(it *rangeItem) bool {
		read++
		if conflicts(h, it.h) {
			n++
		}
		return true
	})
	return n, read
}

// appendRanges appends to hs the holds of sp's range locks, then of its queued range requests,
// oldest first, for a view to visit one at a time.
func (sp *rangeSpace) appendRanges(hs []*Hold) []*Hold {
	for _, t := range []*rangeTree{&sp.ranges.shared, &sp.ranges.exclusive} {
		t.meeting(nil, nil, func(it *rangeItem) bool {
			hs = append(hs, it.h)
			return true
		})
	}
	for _, it := range sp.queue {
		hs = append(hs, it.h)
	}
	return hs
}

// queuedRangesOver counts the range requests queued over the key of h, a holder of a key, that
// conflict with it.
func (sh *shard) queuedRangesOver(h *Hold) int {
	sp := sh.spaces[h.cf]
	if sp == nil || len(sp.queue) == 0 {
		return 0
	}
	n := 0
	sp.ranges.queuedOver(h, func(it *rangeItem) bool {
		if conflicts(h, it.h) {
			n++
		}
		return true
	})
	sh.counts.visited += uint64(n)
	return n
}

// visitRange calls f on h, a range hold or request of the shard listed before the mutex was
// taken, if it still holds its range and its lease is live (a lapse is settled), with the number
// of queued requests that conflict with it.
func (sh *shard) visitRange(h *Hold, f func(h *Hold, waiters int)) {
	it := &h.cold.span.item
	if !it.inTree || it.w != nil || h.flags()&FlagHeld == 0 {
		return
	}
	if h.flags()&FlagFencing == 0 && h.settle(sh) {
		return
	}
	n, read := sh.spaces[h.cf].rangeWaiters(h)
	sh.counts.visited += uint64(1 + read)
	f(h, n)
}

// visitRangeWaits calls wait on h, a range request of the shard listed before the mutex was taken
// (appendRanges), if it is still queued, or, unless holder is nil, holder on h, a range lock, if it
// still holds its range and a conflicting request is queued.
func (sh *shard) visitRangeWaits(h *Hold, wait func(QueuedRequest), holder func(h *Hold, waiters int)) {
	it := &h.cold.span.item
	switch {
	case !it.inTree:
	case it.w != nil:
		sh.counts.visited++
		wait(it.w.request())
	case holder != nil:
		if n, read := sh.spaces[h.cf].rangeWaiters(h); n > 0 {
			sh.counts.visited += uint64(read)
			holder(h, n)
		}
	}
}

// rangesEmpty reports whether the shard's spaces hold no range lock or request.
func (sh *shard) rangesEmpty() bool {
	for _, sp := range sh.spaces {
		if sp.ranges.n != 0 {
			return false
		}
	}
	return true
}

// QueuedRanges counts the range requests fully queued (as Queued counts a key's) in column
// family cf.
func (t *Table) QueuedRanges(cf uint32) int {
	sp := t.spaceOf(cf)
	if sp == nil {
		return 0
	}
	sh := sp.home
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	for _, it := range sh.spaces[cf].queue {
		if w := it.w; w.counted && !w.recheck && !w.checking {
			n++
		}
	}
	return n
}
