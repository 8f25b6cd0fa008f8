package locktable

import (
	"slices"

	"github.com/recordlock/recordlock/internal/spans"
)

// What the table's views, probes and Shutdown see of range locks: each is read in its column
// family's home shard, with that shard's keys.

// evictRanges is evict for the range locks and requests of c in the shard's spaces.
func (sh *shard) evictRanges(c *Tenant, held []*Claim) []*Claim {
	for _, sp := range sh.spaces {
		var mine []*waiter
		sp.ranges.meeting(nil, nil, func(y *Claim) bool {
			switch w := itemOf(y).w; {
			case y.ten != c:
			case w == nil:
				held = append(held, y)
			default:
				mine = append(mine, w)
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
// keys inside it, and range requests over it. WaitedOn asks it of one lock, which a walk of the
// requests over the lock answers; a view asks of many, and counts from its index
// (queuedindex.go).
func (sp *rangeSpace) rangeWaiters(h *Claim) int {
	n := 0
	sp.requestsOver(h, func(x *Claim) {
		if conflicts(h, x) {
			n++
		}
	})
	return n
}

// requestsOver calls f on the claims of the requests queued over h's key set: for a range, the
// requests for the keys inside it and the range requests that meet it; for a key, the range
// requests over it (its own queue is the key's).
func (sp *rangeSpace) requestsOver(h *Claim, f func(*Claim)) {
	if h.isRange() {
		sp.keysIn(h.key(), h.cold.span.End, func(e *keyEntry) bool {
			for w := e.head; w != nil; w = w.next {
				f(w.h)
			}
			return true
		})
	}
	sp.ranges.queuedOver(h, func(y *Claim) bool {
		f(y)
		return true
	})
}

// appendRanges appends to hs the claims of sp's range locks, then of its queued range requests,
// oldest first, for a view to visit one at a time. The locks of one span are listed together
// (by start, then end), so that a view counts the requests queued over that span once for all
// of them (visitRanges).
func (sp *rangeSpace) appendRanges(hs []*Claim) []*Claim {
	for _, t := range []*rangeTree{&sp.ranges.shared, &sp.ranges.exclusive} {
		from := len(hs)
		t.Meeting(nil, nil, func(y *Claim) bool {
			hs = append(hs, y)
			return true
		})
		sortRunsByEnd(hs[from:])
	}
	for _, it := range sp.queue {
		hs = append(hs, it.Value)
	}
	return hs
}

// sortRunsByEnd sorts each run of claims with one start in hs, which is in order of start, by
// end, keeping the order of those with one end too.
func sortRunsByEnd(hs []*Claim) {
	for i := 0; i < len(hs); {
		j := i + 1
		for j < len(hs) && spans.Compare(hs[j].key(), hs[i].key()) == 0 {
			j++
		}
		if j-i > 1 {
			slices.SortStableFunc(hs[i:j], func(a, b *Claim) int { return compareEnds(a.cold.span.End, b.cold.span.End) })
		}
		i = j
	}
}

// compareEnds orders range ends, nil (no bound) last.
func compareEnds(a, b []byte) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	return spans.Compare(a, b)
}

// queuedRangesOver returns the index of h's space in xs, the view's indexes, with the range
// requests queued over the key of h, a holder of a key, counted there for all its holders (a
// holder's own count is x.conflictingOf(&c, holder)); a nil index when no range request is
// queued in its column family.
func (sh *shard) queuedRangesOver(h *Claim, xs *spaceIndexes) (x *queuedIndex, c spanCounts) {
	sp := sh.spaces[h.cf]
	if sp == nil || len(sp.queue) == 0 {
		return nil, c
	}
	x = xs.of(sp, &sh.counts.visited)
	return x, x.countsOver(h)
}

// heldRange reports whether h, a range claim listed before its home shard's mutex was taken,
// still holds its range, with that mutex held.
func heldRange(h *Claim) bool {
	it := &h.cold.span.item
	return it.in != inNone && it.w == nil && h.flags()&flagHeld != 0
}

// heldOverSpan reports whether x, a range claim listed before its home shard's mutex was taken,
// still holds h's span, h being a range lock, with that mutex held: a view visits the two
// together.
func heldOverSpan(h, x *Claim) bool { return heldRange(x) && x.cf == h.cf && sameSpan(h, x) }

// spanRun returns how many claims at the start of hs, the first a range lock, lock its span, with
// their home shard's mutex held.
func spanRun(hs []*Claim) int {
	n := 1
	for n < len(hs) && heldOverSpan(hs[0], hs[n]) {
		n++
	}
	return n
}

// visitRanges calls f on hs[0], a range claim or request of the shard listed before the mutex was
// taken, and on the claims listed after it that lock the same span (appendRanges lists those
// together), each that still holds its range with its lease live (a lapse is settled), with the
// number of queued requests that conflict with it, read from xs, the view's indexes of the
// requests queued in each space (queuedindex.go). It returns how many of hs it looked at.
func (sh *shard) visitRanges(hs []*Claim, xs *spaceIndexes, f func(s Snapshot, waiters int)) int {
	if !heldRange(hs[0]) {
		return 1
	}
	n := spanRun(hs)
	live := make([]*Claim, 0, n)
	for _, h := range hs[:n] {
		if h.flags()&flagFencing == 0 && h.settle(sh) {
			continue
		}
		live = append(live, h)
	}
	sh.counts.visited.Add(uint64(n))
	if len(live) == 0 {
		return n
	}
	x := xs.of(sh.spaces[live[0].cf], &sh.counts.visited)
	c := x.countsOver(live[0])
	for _, h := range live {
		f(h.snapshot(), x.conflictingOf(&c, h))
	}
	return n
}

// visitRangeWaits calls wait on hs[0], a range request of the shard listed before the mutex was
// taken (appendRanges), if it is still queued; or, unless holder is nil, holder on hs[0], a range
// lock, and on the locks of its span listed after it, each that still holds its range and has a
// conflicting request queued, counted from xs as visitRanges counts them. It returns how many of
// hs it looked at.
func (sh *shard) visitRangeWaits(hs []*Claim, xs *spaceIndexes, wait func(QueuedRequest), holder func(s Snapshot, waiters int)) int {
	h := hs[0]
	it := &h.cold.span.item
	switch {
	case it.in == inNone:
	case it.w != nil:
		sh.counts.visited.Inc()
		wait(it.w.request())
	case holder != nil && heldRange(h):
		n := spanRun(hs)
		sh.counts.visited.Add(uint64(n))
		x := xs.of(sh.spaces[h.cf], &sh.counts.visited)
		c := x.countsOver(h)
		for _, r := range hs[:n] {
			if n := x.conflictingOf(&c, r); n > 0 {
				holder(r.snapshot(), n)
			}
		}
		return n
	}
	return 1
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
