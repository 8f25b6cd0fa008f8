package locktable

import (
	"slices"
	"sort"

	"github.com/recordlock/recordlock/internal/invariants"
	"github.com/recordlock/recordlock/internal/spans"
)

// queuedIndex is what a view reads of the requests queued in a range space, once per visit of its
// home shard (VisitHolders, VisitWaits): the key sets of the requests, by kind (range requests, key
// requests) and by mode (all, exclusive), each as sorted starts and ends, and each owner's requests
// apart. A holder's count of the queued requests that conflict with it is then a difference of
// binary searches: a range request meets [start, end) when it starts before end and does not end at
// or before start. A walk of the requests that meet each holder would cost O(s·q) for s holders of
// different spans that all meet q requests; the index costs O((n + q) log q) to make, for the q
// requests and the n keys brought into the home shard, O(log q) per key or span, and O(1) per
// holder of it (with one owner's few requests).
type queuedIndex struct {
	ranges [2]spanEnds // [0] every range request, [1] the exclusive ones
	keys   [2][][]byte // the keys of the key requests, sorted, with the same two modes
	// owned is each owner's queued requests: a holder's own never conflict with it.
	owned map[Owner][]queuedSpan
	// visited is the shard's count of what views read (shardCounts.visited): the requests
	// indexed and the probes of the binary searches go to it, for the tests that bound the
	// views' cost.
	visited *invariants.Counter
}

// queuedSpan is one owner's queued request, as queuedIndex keeps it: a range's span, or a key.
type queuedSpan struct {
	start, end         []byte // end nil: no bound; a key request's end is unused
	isRange, exclusive bool
}

// spanEnds holds the starts and the ends of a set of spans, each sorted; a nil end (no bound)
// sorts last.
type spanEnds struct {
	starts, ends [][]byte
}

// indexQueued reads the requests queued in sp into a queuedIndex, whose steps go to visited.
func (sp *rangeSpace) indexQueued(visited *invariants.Counter) *queuedIndex {
	x := &queuedIndex{visited: visited}
	// Room for every range request at once: the view makes an index per call, and growing four
	// slices a doubling at a time would be most of its allocations.
	q := len(sp.queue)
	ranges := make([][]byte, 4*q)
	for m := range 2 {
		x.ranges[m].starts, ranges = ranges[:0:q], ranges[q:]
		x.ranges[m].ends, ranges = ranges[:0:q], ranges[q:]
	}
	own := func(h *Claim, s queuedSpan) {
		if h.owner == nil {
			return
		}
		if x.owned == nil {
			x.owned = map[Owner][]queuedSpan{}
		}
		x.owned[h.owner] = append(x.owned[h.owner], s)
	}
	sp.ranges.queued.Meeting(nil, nil, func(y *Claim) bool {
		exclusive := y.flags()&flagShared == 0
		start, end := y.key(), y.cold.span.End
		for m := range 2 {
			if m == 0 || exclusive {
				x.ranges[m].starts = append(x.ranges[m].starts, start)
				x.ranges[m].ends = append(x.ranges[m].ends, end)
			}
		}
		own(y, queuedSpan{start: start, end: end, isRange: true, exclusive: exclusive})
		x.visited.Inc()
		return true
	})
	sp.keys.Ascend(func(e *keyEntry) bool { // in key order: the keys come sorted
		key := e.homeKey()
		for w := e.head; w != nil; w = w.next {
			exclusive := w.h.flags()&flagShared == 0
			for m := range 2 {
				if m == 0 || exclusive {
					x.keys[m] = append(x.keys[m], key)
				}
			}
			own(w.h, queuedSpan{start: key, exclusive: exclusive})
			x.visited.Inc()
		}
		x.visited.Inc()
		return true
	})
	for m := range 2 {
		slices.SortFunc(x.ranges[m].starts, spans.Compare)
		slices.SortFunc(x.ranges[m].ends, compareEnds)
	}
	return x
}

// search is sort.Search, its probes counted in x.visited.
func (x *queuedIndex) search(n int, f func(int) bool) int {
	return sort.Search(n, func(i int) bool { x.visited.Inc(); return f(i) })
}

// before counts the keys of sorted that sort before key (nil: no bound, after every key).
func (x *queuedIndex) before(sorted [][]byte, key []byte) int {
	if key == nil {
		return len(sorted)
	}
	return x.search(len(sorted), func(i int) bool { return spans.Compare(sorted[i], key) >= 0 })
}

// rangesMeeting counts the spans of e that meet [start, end) (end nil: no bound), or with
// oneKey the key start alone: those that start before its end, less those that end at or before
// its start, which start before its end too.
func (x *queuedIndex) rangesMeeting(e *spanEnds, start, end []byte, oneKey bool) int {
	var started int
	if oneKey {
		started = x.search(len(e.starts), func(i int) bool { return spans.Compare(e.starts[i], start) > 0 })
	} else {
		started = x.before(e.starts, end)
	}
	ended := x.search(len(e.ends), func(i int) bool { return e.ends[i] == nil || spans.Compare(e.ends[i], start) > 0 })
	return started - ended
}

// spanCounts are the requests indexed that meet one key set, a range's span or a key: for a
// range, the key and range requests that meet it; for a key, the range requests over it (its own
// queue is counted apart). By the mode of a holder of the set: [0] all of them, for an exclusive
// holder, [1] the exclusive ones, for a shared one.
type spanCounts struct {
	start, end []byte // end nil: no bound; unused for a key
	isRange    bool
	n          [2]int
}

// countsOver counts the requests indexed that meet h's key set, for every holder of that set:
// the holders of one key, or the range locks of one span, share them.
func (x *queuedIndex) countsOver(h *Claim) spanCounts {
	c := spanCounts{start: h.key(), isRange: h.isRange()}
	for m := range 2 {
		if c.isRange {
			c.end = h.cold.span.End
			c.n[m] = x.rangesMeeting(&x.ranges[m], c.start, c.end, false) + x.before(x.keys[m], c.end) - x.before(x.keys[m], c.start)
		} else {
			c.n[m] = x.rangesMeeting(&x.ranges[m], c.start, nil, true)
		}
	}
	return c
}

// conflictingOf is the number of the requests c counts that conflict with h, a holder of c's key
// set: all of them for an exclusive h, the exclusive ones for a shared h, and none of h's owner.
func (x *queuedIndex) conflictingOf(c *spanCounts, h *Claim) int {
	mode := 0
	if h.flags()&flagShared != 0 {
		mode = 1
	}
	n := c.n[mode]
	if h.owner != nil {
		for _, q := range x.owned[h.owner] {
			x.visited.Inc()
			if (mode == 0 || q.exclusive) && q.meets(c.start, c.end, c.isRange) {
				n--
			}
		}
	}
	return n
}

// conflicting is the number of the requests indexed that conflict with h, a holder in the space.
func (x *queuedIndex) conflicting(h *Claim) int {
	c := x.countsOver(h)
	return x.conflictingOf(&c, h)
}

// meets reports whether q, an owner's request counted as the kind conflicting counts for a
// holder, meets the holder's key set: the range [start, end) when isRange, else the key start.
// A key request meets only a range, and is not counted for a key holder.
func (q queuedSpan) meets(start, end []byte, isRange bool) bool {
	switch {
	case isRange && q.isRange:
		return spansMeet(q.start, q.end, start, end)
	case isRange:
		return spanContains(start, end, q.start)
	case q.isRange:
		return spanContains(q.start, q.end, start)
	}
	return false
}

// spaceIndexes are the queuedIndex of each range space a view has visited, made at the space's
// first visit in that view.
type spaceIndexes map[*rangeSpace]*queuedIndex

// of returns sp's index, made now if the view has none yet; its steps go to visited.
func (xs *spaceIndexes) of(sp *rangeSpace, visited *invariants.Counter) *queuedIndex {
	if x := (*xs)[sp]; x != nil {
		return x
	}
	if *xs == nil {
		*xs = spaceIndexes{}
	}
	x := sp.indexQueued(visited)
	(*xs)[sp] = x
	return x
}
