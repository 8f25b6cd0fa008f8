package locktable

// The wait-for edges of range mode (docs/DESIGN.md §17): a request waits for every conflicting
// holder of a key or range that meets it, and for every conflicting request queued before it.
// A request of no owner queued before it passes on its own waits: the request behind waits, through
// it, for the holders that request conflicts with.

// rangeEdges adds, through add, the owners that w, the waiting request of h in sp, waits for by
// range mode's rule; addHolder adds a holder's owner unless its lease has passed. For a key's
// request the edges to the key's own holders and queue are the key's rule's (waitgraph.go).
func (sp *rangeSpace) rangeEdges(h *Hold, w *waiter, add func(Owner), addHolder func(*Hold)) {
	ahead := func(x *waiter, xh *Hold) {
		if xh.owner != nil {
			add(xh.owner)
			return
		}
		sp.holdersBlocking(xh, func(y *Hold) {
			addHolder(y)
		})
	}
	if w.space == nil { // a key's request: the ranges over its key
		key := h.e.ranged().key
		sp.ranges.containing(key, func(it *rangeItem) bool {
			switch {
			case it.w == nil && conflicts(h, it.h):
				addHolder(it.h)
			case it.w != nil && it.seq < w.seq && conflicts(h, it.h):
				ahead(it.w, it.h)
			}
			return true
		})
		return
	}
	start, end := h.key(), h.cold.span.end
	sp.keysIn(start, end, func(e *keyEntry) bool {
		for _, x := range e.appendHolders(nil) {
			if conflicts(h, x) {
				addHolder(x)
			}
		}
		for x := e.head; x != nil; x = x.next {
			if x.seq < w.seq && conflicts(h, x.h) {
				ahead(x, x.h)
			}
		}
		return true
	})
	sp.ranges.meeting(start, end, func(it *rangeItem) bool {
		switch {
		case it.w == nil && conflicts(h, it.h):
			addHolder(it.h)
		case it.w != nil && it.seq < w.seq && conflicts(h, it.h):
			ahead(it.w, it.h)
		}
		return true
	})
}

// holdersBlocking calls f on the holders that conflict with x, a queued request of sp: those of
// its key or of the keys in its range, and the range locks that meet it.
func (sp *rangeSpace) holdersBlocking(x *Hold, f func(*Hold)) {
	var start, end []byte
	if x.IsRange() {
		start, end = x.key(), x.cold.span.end
		sp.keysIn(start, end, func(e *keyEntry) bool {
			for _, y := range e.appendHolders(nil) {
				if conflicts(x, y) {
					f(y)
				}
			}
			return true
		})
	} else if e := x.e; e != nil {
		for _, y := range e.appendHolders(nil) {
			if conflicts(x, y) {
				f(y)
			}
		}
		start = e.ranged().key
		end = append(start[:len(start):len(start)], 0)
	}
	sp.ranges.meeting(start, end, func(it *rangeItem) bool {
		if it.w == nil && conflicts(x, it.h) {
			f(it.h)
		}
		return true
	})
}
