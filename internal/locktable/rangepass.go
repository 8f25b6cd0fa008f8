package locktable

// The one exception to the order of arrival in range mode (docs/DESIGN.md §17.2): a request of an
// owner never waits behind a queued request that itself waits for a lock that owner holds. That
// request cannot be served before the owner lets go anyway, so passing it starves nobody, and
// waiting behind it would be a deadlock: a writer that holds key a and asks for key b would
// otherwise queue behind a reader's range request over both, which waits for a. Everything here
// runs under the home shard's mutex.

// passes reports whether h, a request, may pass x, a request queued before it: h's owner holds
// locks (FlagOwnerHolds), and x waits for one of them.
func (sp *rangeSpace) passes(h *Hold, x *waiter) bool {
	o := h.owner
	if o == nil || h.flags()&FlagOwnerHolds == 0 || x.h.owner == o {
		return false
	}
	return sp.waitsForOwner(x, o)
}

// waitsForOwner reports whether x, a request queued in sp, conflicts with a lock o holds that
// meets its key set: a range lock, or a key's lock of its key or of a key inside its range.
func (sp *rangeSpace) waitsForOwner(x *waiter, o Owner) bool {
	xh := x.h
	found := false
	sp.rangesOver(xh, func(it *rangeItem) bool {
		found = it.w == nil && it.h.owner == o && conflicts(xh, it.h)
		return !found
	})
	if found {
		return true
	}
	holds := func(y *Hold) bool { return y.owner == o && conflicts(xh, y) }
	held := func(e *keyEntry) bool {
		if e.holder == nil {
			return true
		}
		found = holds(e.holder)
		for _, y := range e.sharers {
			found = found || holds(y)
		}
		return !found
	}
	switch {
	case x.space != nil:
		sp.keysIn(xh.key(), xh.cold.span.end, held)
	case xh.e != nil:
		held(xh.e)
	}
	return found
}

// passPoint returns the first request queued for e's key, a key of sp, that h, a newcomer for
// it, passes, or nil: h is queued ahead of it (enqueueBefore), and when it is the head, h takes
// the key as if nobody were queued.
func (sp *rangeSpace) passPoint(e *keyEntry, h *Hold) *waiter {
	if h.owner == nil || h.flags()&FlagOwnerHolds == 0 {
		return nil
	}
	for w := e.head; w != nil; w = w.next {
		if sp.passes(h, w) {
			return w
		}
	}
	return nil
}

// admitsPast reports whether h, a newcomer that passes every request queued for e's key, takes
// the key at once: a shared request while the key is free or held shared, an exclusive one while
// it is free.
func (e *keyEntry) admitsPast(h *Hold) bool {
	if h.flags()&FlagShared != 0 {
		return e.holder == nil || e.shares > 0
	}
	return e.holder == nil
}
