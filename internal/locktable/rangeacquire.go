package locktable

import "time"

// Taking a range (docs/DESIGN.md §17.1): a range request publishes its span, brings in the keys
// inside it, and is granted or queued by the grant rule (rangegrant.go).

// newRangedEntry adds an entry for h's key, which a live span covers, to the home shard.
func (sh *shard) newRangedEntry(sp *rangeSpace, h *Claim) *keyEntry {
	e := sh.newEntry(h.hash)
	e.space, e.keyClaim = sp, h // the claim's key never changes
	sh.index.insert(e)
	sp.keys.ReplaceOrInsert(e)
	return e
}

// acquireRange is Acquire of a range claim. Its span goes into the cover first, then the keys
// inside it that are still in their own shards are brought into the home shard (bringIn), unless
// the span of a range whose keys are all in already holds all of it (rangeSet.holdsSpan); only then is the
// request placed among the others, in the order of arrival, as a request that arrives then.
func (h *Claim) acquireRange(r *acquireReq) (time.Duration, error) {
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
	it.ready(h, sp.nextSeq())
	start, end := h.key(), h.cold.span.End
	inside := sp.ranges.holdsSpan(start, end)
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
	r.wall, r.mono = ReadClock(c.clock)
	if !sp.rangeBlocked(sh, h, newest, true, c, r.mono) {
		sh.grantRange(sp, it, r.wall, r.mono, r.lease)
		sh.unlockAndRunDeferred()
		return r.mono, nil
	}
	if !r.wait {
		sp.spanGone(it)
		sh.unlockAndRunDeferred()
		return 0, ErrLocked
	}
	w := &waiter{h: h, since: r.mono, lease: r.lease, wake: make(chan struct{}, 1), shared: h.flags()&flagShared != 0, space: sp}
	it.w, w.seq = w, sp.nextSeq()
	sp.ranges.insert(it)
	sp.queue = append(sp.queue, it)
	return r.mono, sh.sleep(r.ctx, nil, w, r.deadline())
}

// grantRange makes h's claim a holder of its range, with a lease of lease from the readings wall
// and mono of its clock. A range's deadline is always on a timer: requests for keys inside it
// can queue without looking at it again.
func (sh *shard) grantRange(sp *rangeSpace, it *rangeItem, wall int64, mono, lease time.Duration) {
	h := it.Value
	it.w = nil
	if it.in != inNone {
		sp.ranges.refile(it) // from the queued requests to the locks held
	} else {
		sp.ranges.insert(it)
	}
	h.e = nil
	h.acquiredAt = sh.tab.stamps.Mint(wall)
	h.expiresAt = wall + int64(lease)
	h.deadline.Store(int64(MonoAfter(mono, lease)))
	h.state.Store(h.flags() | flagHeld)
	sh.acquired++
	sh.held++
	sh.schedule(h)
}

// watchSpan watches the holders of the keys inside h's range, for a range request that queues
// (range locks are always watched), and tells them and the range locks it meets that a request
// waits for them (tellHolders).
func (sh *shard) watchSpan(sp *rangeSpace, h *Claim) {
	sp.keysIn(h.key(), h.cold.span.End, func(e *keyEntry) bool {
		sh.watchHolders(e)
		sh.tellHolders(e)
		return true
	})
	for _, t := range []*rangeTree{&sp.ranges.shared, &sp.ranges.exclusive} {
		t.Meeting(h.key(), h.cold.span.End, func(y *Claim) bool {
			sh.tellHolder(y)
			return true
		})
	}
}
