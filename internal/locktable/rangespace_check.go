//go:build invariants

package locktable

import (
	"bytes"
	"slices"
	"unsafe"

	"github.com/recordlock/recordlock/internal/spans"
)

// The checks of a home shard's range spaces in a build with the tag invariants: what the
// Invariants block of rangeSpace writes down, read as shard_check.go's checkLocked calls them.

// checkSpace checks sp, the range space of column family cf whose home is sh, and returns how
// many range locks it holds and how many of its queued range requests are counted waiting.
func (sh *shard) checkSpace(cf uint32, sp *rangeSpace) (held, counted int) {
	r := &sp.ranges
	if r.n != r.shared.Len()+r.exclusive.Len()+r.queued.Len() {
		violated("a range set counts its items", "n %d, trees %d, %d and %d", r.n, r.shared.Len(), r.exclusive.Len(), r.queued.Len())
	}
	if sp.serving || sp.again || sp.repassDue {
		violated("a range space is served and gone over before the mutex is released",
			"serving %v, again %v, repassDue %v", sp.serving, sp.again, sp.repassDue)
	}
	var shared, exclusive []*Claim // the range locks, each in order of start
	collect := func(in inTree, out *[]*Claim) {
		r.tree(in).Visit(nil, nil, func(h *Claim) bool {
			sh.checkRangeItem(cf, sp, itemOf(h), in)
			*out = append(*out, h)
			return true
		})
	}
	collect(inShared, &shared)
	collect(inExclusive, &exclusive)
	queued := map[*rangeItem]bool{}
	upgrades := 0
	r.queued.Visit(nil, nil, func(h *Claim) bool {
		it := itemOf(h)
		sh.checkRangeItem(cf, sp, it, inQueued)
		queued[it] = true
		if it.w.counted {
			counted++
		}
		if it.w.upgrade != nil {
			upgrades++ // its stand-in's span is not in the cover: the lock's is
		}
		return true
	})
	sh.checkRangeQueue(sp, queued)
	sh.checkCover(sp, len(shared)+len(exclusive)+len(queued)-upgrades)
	sh.checkKeysBroughtIn(cf, sp)
	if !sh.tab.ranges.noConflicts.Load() {
		sh.checkRangeGrants(sp, mergeByStart(shared, exclusive))
	}
	for o, w := range sp.waiting {
		if w.listed != sp || w.left || w.h.owner != o || w.h.w != w {
			violated("a space's waiting owners are queued there", "listed here %v, left %v, its owner's %v, its claim's %v",
				w.listed == sp, w.left, w.h.owner == o, w.h.w == w)
		}
	}
	return len(shared) + len(exclusive), counted
}

// mergeByStart merges a and b, each in order of start, into one list in that order.
func mergeByStart(a, b []*Claim) []*Claim {
	out := make([]*Claim, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if spans.Compare(b[0].key(), a[0].key()) < 0 {
			out, b = append(out, b[0]), b[1:]
		} else {
			out, a = append(out, a[0]), a[1:]
		}
	}
	return append(append(out, a...), b...)
}

// checkRangeItem checks it, found in the tree in of sp's range set.
func (sh *shard) checkRangeItem(cf uint32, sp *rangeSpace, it *rangeItem, in inTree) {
	h := it.Value
	f := h.flags()
	switch {
	case it.in != in || sp.ranges.treeFor(it) != in:
		violated("a range item is in the tree of its state and mode", "in %d, recorded %d, belongs in %d", in, it.in, sp.ranges.treeFor(it))
	case f&flagRange == 0 || h.cf != cf || it.covering == (in == inQueued && it.w != nil && it.w.upgrade != nil):
		violated("a range item is a range claim of its space's column family, in the cover unless an upgrade's",
			"range %v, cf %d of %d, covering %v", f&flagRange != 0, h.cf, cf, it.covering)
	case in != inQueued && (f&flagHeld == 0 || h.w != nil || it.w != nil):
		violated("a range lock is held", "held %v, waiting %v", f&flagHeld != 0, h.w != nil || it.w != nil)
	case in != inQueued && h.heapIdx < 0 && f&(flagReleased|flagExpired) == 0:
		violated("a range lock is on a timer", "range [%q, %q)", h.key(), h.cold.span.End)
	case in == inQueued && (it.w == nil || it.w.h != h || h.w != it.w || it.w.space != sp || it.w.left || it.w.state != waitQueued):
		violated("a queued range request is queued in its space", "range [%q, %q)", h.key(), h.cold.span.End)
	case in == inQueued && h.heapIdx < 0:
		violated("a queued request's timeout is on a timer", "range [%q, %q)", h.key(), h.cold.span.End)
	case in == inQueued && it.w.upgrade != nil && (it.w.seq != 0 || it.w.upgrade.flags()&flagShared == 0):
		violated("a range upgrade is of a shared range lock, ahead of every request", "range [%q, %q)", h.key(), h.cold.span.End)
	}
	if in == inQueued {
		if x := it.w.runHead; x != nil && !x.left &&
			(x.space != sp || !plainExclusive(x) || !plainExclusive(it.w) || !sameSpan(x.h, h) || x.seq >= it.w.seq) {
			violated("a range request's run head is an older plain exclusive request of its span",
				"range [%q, %q)", h.key(), h.cold.span.End)
		}
	}
}

// checkRangeQueue checks sp's queue of range requests against the items of its tree of them: the
// same requests, in the order of arrival, upgrades (seq 0) first.
func (sh *shard) checkRangeQueue(sp *rangeSpace, queued map[*rangeItem]bool) {
	if len(sp.queue) != len(queued) {
		violated("a space's queue of range requests is its tree of them", "queue %d, tree %d", len(sp.queue), len(queued))
	}
	var last uint64
	for i, it := range sp.queue {
		switch seq := it.w.seq; {
		case !queued[it], seq == 0 && slices.Contains(sp.queue[:i], it): // the upgrades, seq 0, come first
			violated("a space's queue of range requests is its tree of them", "place %d", i)
		case seq < last || seq == last && seq != 0:
			violated("a space's queue of range requests is in the order of arrival", "place %d", i)
		}
		last = it.w.seq
	}
}

// checkCover checks sp's cover against its range locks and requests, n of them but the queued
// upgrades: the live spans are theirs and those of the range requests still bringing their keys in
// (covering, in no tree yet), each once (a span's number is its item's, unique in the space);
// every retiring span has orphans.
func (sh *shard) checkCover(sp *rangeSpace, n int) {
	cv := sp.cover.Load()
	inSet := 0
	cv.live.Each(func(s *spans.Span, id uint64) bool {
		it := &(*span)(unsafe.Pointer(s)).item // a live span is a range claim's, the first field of its span
		switch {
		case it.span() != s || it.ID() != id || !it.covering:
			violated("the live cover holds the span of each range lock and request once", "span [%q, %q)", s.Start, s.End)
		case it.in != inNone:
			inSet++
		case it.w != nil || it.Value.flags()&flagHeld != 0:
			violated("the live cover holds the span of each range lock and request once",
				"span [%q, %q) in no tree, of a lock or a queued request", s.Start, s.End)
		}
		return true
	})
	if inSet != n {
		violated("the live cover holds the span of each range lock and request once", "%d of the %d range items", inSet, n)
	}
	cv.retiring.Each(func(s *spans.Span, id uint64) bool {
		r := (*retiredSpan)(unsafe.Pointer(s)) // a retiring span is a retiredSpan's, its first field
		if r.id != id || r.orphans <= 0 {
			violated("a retiring span routes orphans", "span [%q, %q): %d orphans", s.Start, s.End, r.orphans)
		}
		return true
	})
}

// checkKeysBroughtIn checks the keys sp brought into its home shard sh: each is an entry of sh,
// routed there by the cover, a live span or its own retired span, which counts it.
func (sh *shard) checkKeysBroughtIn(cf uint32, sp *rangeSpace) {
	cv := sp.cover.Load()
	orphans := map[*retiredSpan]int{}
	cv.retiring.Each(func(s *spans.Span, _ uint64) bool {
		orphans[(*retiredSpan)(unsafe.Pointer(s))] = 0
		return true
	})
	orphansIndexed := 0
	sp.keys.Ascend(func(e *keyEntry) bool {
		key := e.homeKey()
		recordCF, recordKey := e.record()
		r := sp.orphans[e]
		switch live := cv.live.Covers(key); {
		case e.space != sp || e.keyClaim.cf != cf || recordCF != cf || !bytes.Equal(recordKey, key) || sh.index.find(e.hash, cf, key) != e:
			violated("a key brought in is an entry of its space's home shard, ordered by its own key", "key %q", key)
		case live == (r != nil):
			violated("a key brought in is routed home by a live span or else by its retired span", "key %q: live %v", key, live)
		case r != nil:
			orphansIndexed++
			n, ok := orphans[r]
			if !ok || !spanContains(r.Start, r.End, key) {
				violated("a key brought in is routed home by a live span or else by its retired span",
					"key %q: its retired span is not in the cover or does not hold it", key)
			}
			orphans[r] = n + 1
		}
		return true
	})
	if orphansIndexed != len(sp.orphans) {
		violated("a key brought in is routed home by a live span or else by its retired span",
			"%d orphans listed, %d of them keys in the index", len(sp.orphans), orphansIndexed)
	}
	for r, n := range orphans {
		if n != r.orphans {
			violated("a retiring span counts its orphans", "span [%q, %q): %d, found %d", r.Start, r.End, r.orphans, n)
		}
	}
}

// checkRangeGrants checks that no two locks of sp's column family conflict: no range lock meets
// another that it conflicts with, and none meets a key's lock inside it that it conflicts with.
// (Two holders of one key are the key's own rule: checkHolders.) locks are sp's range locks in
// order of start. Two sweeps in that order find every such pair in O(n) for n locks and keys: a
// range meets one that starts before it exactly when that one ends after its start, and a key lies
// in a range that starts at or before it exactly when that range ends after it; of those, the one
// that ends last among the ranges of other owners (latestEnds) ends after it if any does.
func (sh *shard) checkRangeGrants(sp *rangeSpace, locks []*Claim) {
	var any, excl latestEnds // of the locks swept so far: all of them, and the exclusive ones
	add := func(x *Claim) {
		any.add(x)
		if x.flags()&flagShared == 0 {
			excl.add(x)
		}
	}
	// meets returns the lock swept so far that ends last after at among those that conflict with
	// y by owner and mode, or nil.
	meets := func(y *Claim, at []byte) *Claim {
		ends := &any
		if y.flags()&flagShared != 0 {
			ends = &excl
		}
		if x := ends.of(y); x != nil && endsAfter(x.cold.span.End, at) {
			return x
		}
		return nil
	}
	for _, y := range locks {
		if x := meets(y, y.key()); x != nil {
			violated("no two grants conflict", "range locks %s and %s", describe(x), describe(y))
		}
		add(y)
	}
	any, excl = latestEnds{}, latestEnds{}
	next := 0
	var holders []*Claim
	sp.keys.Ascend(func(e *keyEntry) bool {
		key := e.homeKey()
		for ; next < len(locks) && spans.Compare(locks[next].key(), key) <= 0; next++ {
			add(locks[next])
		}
		holders = e.appendHolders(holders[:0])
		for _, y := range holders {
			if x := meets(y, key); x != nil {
				violated("no two grants conflict", "range lock %s and %s", describe(x), describe(y))
			}
		}
		return true
	})
}

// latestEnds keeps, of the range locks added, the two that end last among those of distinct
// owners (two locks of no owner are of distinct owners): the one that ends last among the locks
// of owners other than any one is one of the two.
type latestEnds struct{ top [2]*Claim }

// endsLater reports whether a range lock a ends after b does.
func endsLater(a, b *Claim) bool {
	ae, be := a.cold.span.End, b.cold.span.End
	return be != nil && (ae == nil || spans.Compare(ae, be) > 0)
}

func (t *latestEnds) add(x *Claim) {
	switch top := t.top[0]; {
	case top == nil || endsLater(x, top):
		if top != nil && !sameOwner(x, top) {
			t.top[1] = top
		}
		t.top[0] = x
	case sameOwner(x, top): // top ends later, for the same owner
	case t.top[1] == nil || endsLater(x, t.top[1]):
		t.top[1] = x
	}
}

// of returns the lock that ends last among those of owners other than y's, or nil.
func (t *latestEnds) of(y *Claim) *Claim {
	if top := t.top[0]; top != nil && !sameOwner(y, top) {
		return top
	}
	return t.top[1]
}

// A range lock's span is the first field of its span, and a retiring span the first of its
// retiredSpan: checkCover and checkKeysBroughtIn find them from the cover's spans so.
var _ = [1]struct{}{}[unsafe.Offsetof(span{}.Span)+unsafe.Offsetof(retiredSpan{}.Span)]
