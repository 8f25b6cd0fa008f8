package locktable

import "time"

// The grant rule in a range space (docs/DESIGN.md §17): two locks conflict when
// their key sets meet and one is exclusive, unless one owner holds both; a request is served after
// every conflicting request queued before it (sp.seq orders them) and never waits for one it does
// not conflict with. Key requests keep the rule of their key (grant.go) and, on top of it, wait
// for the ranges that cover their key. Everything here runs under the home shard's mutex.

// newest is a newcomer's place in the order of arrival: after every queued request.
const newest = ^uint64(0)

// conflicts reports whether a and b, locks or requests whose key sets meet, conflict.
func conflicts(a, b *Claim) bool {
	if a == b || a.owner != nil && a.owner == b.owner {
		return false
	}
	return a.flags()&flagShared == 0 || b.flags()&flagShared == 0
}

// keyBlocked reports whether a range keeps h, a key's request placed seq in the order of
// arrival, from its key: a conflicting range lock, or a conflicting range request queued before
// it. With settle, a conflicting range lock whose lease lapsed at mono (a reading of c's clock) is
// settled first, as a newcomer settles a key's lapsed holders; without, a lapsed range blocks
// until its timer settles it, so that serving a key never ends another lease under it.
func (sp *rangeSpace) keyBlocked(sh *shard, h *Claim, seq uint64, settle bool, c *Tenant, mono time.Duration) bool {
	if sp.ranges.n == 0 || sh.tab.ranges.noConflicts.Load() || !sp.ranges.mayConflict(h.key(), h.flags()&flagShared != 0) {
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
func (sp *rangeSpace) rangeBlocked(sh *shard, h *Claim, seq uint64, settle bool, c *Tenant, mono time.Duration) bool {
	if sh.tab.ranges.noConflicts.Load() {
		return false
	}
	start, end := h.key(), h.cold.span.End
	if settle {
		var lapsed, holders []*Claim
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
// order of arrival, waiting (rangeItem.blocks); a request that h passes (rangepass.go) does not.
func (sp *rangeSpace) rangesBlock(h *Claim, seq uint64) bool {
	blocked := false
	sp.ranges.heldConflicting(h, func(y *Claim) bool {
		blocked = conflicts(h, y)
		return !blocked
	})
	if blocked {
		return true
	}
	sp.ranges.queuedOver(h, func(y *Claim) bool {
		it := itemOf(y)
		blocked = it.blocks(h, seq) && !sp.passes(h, it.w)
		return !blocked
	})
	return blocked
}

// blocks reports whether it, a range lock or request that meets the key set of h, a request
// placed seq in the order of arrival, keeps h waiting: it conflicts with h, and is a lock or a
// request queued before h.
func (it *rangeItem) blocks(h *Claim, seq uint64) bool {
	return (it.w == nil || it.w.seq < seq) && conflicts(h, it.Value)
}

// lapsedRanges appends to lapsed the range locks of sp that meet h's key set, conflict with it,
// and whose lease lapsed at mono (a reading of c's clock) but is not ended yet, and returns it.
// They are collected first: ending one serves what it held up, which can change the tree.
func (sp *rangeSpace) lapsedRanges(h *Claim, c *Tenant, mono time.Duration, lapsed []*Claim) []*Claim {
	sp.ranges.heldConflicting(h, func(y *Claim) bool {
		if conflicts(h, y) && y.lapsedFor(c, mono) {
			lapsed = append(lapsed, y)
		}
		return true
	})
	return lapsed
}

// keyBlocksRange reports whether e's key keeps h, a range request over it placed seq in the
// order of arrival, waiting: a conflicting holder, or a conflicting request queued before it that
// h does not pass (rangepass.go).
func (sp *rangeSpace) keyBlocksRange(e *keyEntry, h *Claim, seq uint64) bool {
	if e.holder != nil {
		if conflicts(h, e.holder) {
			return true
		}
		for _, x := range e.others() {
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
	from := sp.probe(start)
	if end == nil {
		sp.keys.AscendGreaterOrEqual(from, f)
	} else {
		to := sp.probe(end)
		sp.keys.AscendRange(from, to, f)
		sp.unprobe(to)
	}
	sp.unprobe(from)
}
