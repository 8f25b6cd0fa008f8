//go:build invariants

package locktable

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"unsafe"

	"github.com/recordlock/recordlock/internal/spans"
)

// The checker of a build with the tag invariants (internal/invariants): as a shard's mutex is
// about to be released after a change (drainDeferred), it checks what the code assumes of the
// shard's entries, queues, schedulers and range spaces, the Invariants blocks of keyEntry, Claim
// and rangeSpace; as the wait-for graph's mutex is, what the graph keeps (waitGraph). Each check
// is exact, reads what the mutex held guards (and what is read atomically anyway), and changes
// nothing, the counts that tests bound included. A violated invariant panics with a message that
// names it. shard_check_off.go is the checker of a build without the tag, which does nothing.

// checkWhole sets how often a shard is checked whole. With n items (entries, requests waiting,
// order items and range items), a shard is checked at every release while n < 2·checkWhole, and
// else at one release in (n/checkWhole)², which costs O(checkWhole²/n) per operation amortized:
// the tests of small tables, the model check and the stress tests among them, are checked after
// every operation or nearly, and those that hold 100,000 keys or queue 10,000 requests for one key
// now and then, which keeps them within seconds under -race.
const checkWhole = 32

// violated panics with the name of the invariant that does not hold and what was found. The
// message goes to stderr first: a test's cleanup may wait for a mutex the panic left held, and
// the test then times out without printing the panic.
func violated(name, format string, args ...any) {
	msg := fmt.Sprintf("locktable: invariant violated: %s: %s", name, fmt.Sprintf(format, args...))
	fmt.Fprintln(os.Stderr, msg)
	panic(msg)
}

// checkLocked checks sh's invariants with its mutex held, as the mutex is about to be released.
// When one does not hold, the mutex is released as the panic goes up, so that a test's cleanup
// that closes the table does not wait for it.
func (sh *shard) checkLocked() {
	defer func() {
		if p := recover(); p != nil {
			sh.mu.Unlock()
			panic(p)
		}
	}()
	size := sh.index.n + sh.counts.waiting + len(sh.order.pending)
	if sh.order.tree != nil {
		size += sh.order.tree.Len()
	}
	for _, sp := range sh.spaces {
		size += sp.ranges.n
	}
	sh.counts.checks.Inc()
	if n := uint64(size / checkWhole); n > 1 && sh.counts.checks.Load()%(n*n) != 0 {
		return
	}
	home := sh.place() >= KeyShards
	held, counted := 0, 0
	sh.index.all(func(e *keyEntry) {
		h, c := sh.checkEntry(e, home)
		held += h
		counted += c
	})
	inSpaces := 0
	for cf, sp := range sh.spaces {
		h, c := sh.checkSpace(cf, sp)
		held += h
		counted += c
		inSpaces += sp.keys.Len()
	}
	if home && inSpaces != sh.index.n {
		violated("a home shard's entries are its spaces' keys", "%d entries, %d keys in its spaces", sh.index.n, inSpaces)
	}
	if held != sh.held {
		violated("the shard counts its holders", "held %d, found %d", sh.held, held)
	}
	if counted != sh.counts.waiting {
		violated("the shard counts its waiting requests", "waiting %d, found %d counted", sh.counts.waiting, counted)
	}
	if len(sh.repassDue) > 0 {
		violated("the spaces marked for a repass are gone over before the mutex is released", "%d left", len(sh.repassDue))
	}
	sh.schedulers(func(s *scheduler) { sh.checkScheduler(s) })
	if !home {
		sh.checkOrder()
	}
}

// place is sh's place among its table's shards.
func (sh *shard) place() int {
	return int((uintptr(unsafe.Pointer(sh)) - uintptr(unsafe.Pointer(&sh.tab.shards[0]))) / unsafe.Sizeof(shard{}))
}

// checkEntry checks e, an entry of sh's index, and returns how many holders it has and how many
// of its queued requests are counted waiting.
func (sh *shard) checkEntry(e *keyEntry, home bool) (held, counted int) {
	cf, key := e.record()
	switch {
	case e.holder == nil && e.head == nil:
		violated("an entry is held or waited on", "entry of %q has neither holder nor request", key)
	case sh.tab.shard(e.hash) != sh || sh.index.find(e.hash, cf, key) != e:
		violated("an entry is in the index of the shard its hash names", "entry of %q", key)
	case (e.rangedKey != nil) != home:
		violated("an entry of a home shard, and only of one, is a key brought in", "entry of %q", key)
	}
	held = sh.checkHolders(e, key)
	counted = sh.checkQueue(e, key, home)
	return held, counted
}

// checkHolders checks e's holders against its shares, and each holder against e.
func (sh *shard) checkHolders(e *keyEntry, key []byte) int {
	switch {
	case e.holder == nil:
		if e.shares != 0 || len(e.sharers) != 0 {
			violated("a free key has no sharer", "key %q: shares %d, %d sharers", key, e.shares, len(e.sharers))
		}
		return 0
	case e.shares == 0:
		if len(e.sharers) != 0 || e.holder.flags()&flagShared != 0 {
			violated("a key held exclusively has one holder, not shared",
				"key %q: %d sharers, holder shared %v", key, len(e.sharers), e.holder.flags()&flagShared != 0)
		}
	case int(e.shares) != 1+len(e.sharers):
		violated("a key held shared counts its sharers", "key %q: shares %d, holder and %d sharers", key, e.shares, len(e.sharers))
	}
	holders := e.appendHolders(nil)
	for i, h := range holders {
		f := h.flags()
		switch {
		case f&flagHeld == 0 || h.e != e || h.w != nil || f&flagRange != 0:
			violated("a holder of a key is held there", "key %q: holder %d: held %v, its entry %v, waiting %v, range %v",
				key, i, f&flagHeld != 0, h.e == e, h.w != nil, f&flagRange != 0)
		case e.shares > 0 && (f&flagShared == 0 || e.placeOf(h) != i):
			violated("a sharer is shared and knows its place", "key %q: sharer %d: shared %v, place %d", key, i, f&flagShared != 0, e.placeOf(h))
		case (f&flagInHomeShard != 0) != (e.rangedKey != nil):
			violated("a holder of a key in a home shard, and only one, is marked so", "key %q: holder %d", key, i)
		case f&(flagReleased|flagExpired) != 0 && f&(flagFencing|flagPassOnAfterFence) != flagFencing|flagPassOnAfterFence:
			violated("a dead holder keeps its key only inside a fence, to pass it on as the fence ends",
				"key %q: holder %d released %v, expired %v, fencing %v", key, i, f&flagReleased != 0, f&flagExpired != 0, f&flagFencing != 0)
		case e.head != nil && h.heapIdx < 0 && f&(flagReleased|flagExpired) == 0:
			violated("the holders of a key with a request queued are on a timer", "key %q: holder %d", key, i)
		}
	}
	return len(holders)
}

// checkQueue checks e's queue: its links, each request against e, the woken request, the count
// of owners that held other keys as they asked, and, in a key shard, the wait-for edge each shared
// request reads from its record (exclusiveAhead) against the queue itself. It returns how many
// of its requests are counted waiting.
func (sh *shard) checkQueue(e *keyEntry, key []byte, home bool) (counted int) {
	woken, holding := 0, 0
	var prev, lastEx *waiter // lastEx: the nearest exclusive request ahead that is not an upgrade
	upAhead, pastUpgrades := false, false
	for w := e.head; w != nil; prev, w = w, w.next {
		switch {
		case w.prev != prev:
			violated("a queue is linked both ways", "key %q", key)
		case w.h.w != w || w.h.e != e || w.left || w.space != nil:
			violated("a queued request is queued for its key", "key %q: its claim's request %v, its entry %v, left %v, a range's %v",
				key, w.h.w == w, w.h.e == e, w.left, w.space != nil)
		case w.state != waitQueued && w.state != waitWoken:
			violated("a queued request is asleep or woken", "key %q: state %d", key, w.state)
		case w.h.heapIdx < 0:
			violated("a queued request's timeout is on a timer", "key %q", key)
		case w.upgrade != nil && e.placeOf(w.upgrade) < 0:
			violated("an upgrade is of a sharer of its key", "key %q", key)
		case !home && w.upgrade != nil && pastUpgrades:
			violated("upgrades are queued ahead of every other request", "key %q", key)
		}
		if w.state == waitWoken {
			woken++
		}
		if w.ownerHolds {
			holding++
		}
		if w.counted {
			counted++
		}
		if !home && w.shared {
			sh.checkExclusiveAhead(e, w, lastEx, upAhead, key)
		}
		switch {
		case w.upgrade != nil:
			upAhead = true
		case !w.shared:
			lastEx, pastUpgrades = w, true
		default:
			pastUpgrades = true
		}
	}
	switch {
	case prev != e.tail:
		violated("a queue is linked both ways", "key %q: the tail is not the last request", key)
	case woken != 0 && !e.wakePending || woken > 1 || woken == 0 && e.wakePending:
		violated("a key with a woken request, and only one, waits for it", "key %q: %d woken, wakePending %v", key, woken, e.wakePending)
	case holding != int(e.ownersHolding):
		violated("a key counts the requests of owners that held other keys", "key %q: ownersHolding %d, found %d", key, e.ownersHolding, holding)
	}
	return counted
}

// checkExclusiveAhead checks the edge that the wait-for graph reads for w, a shared request
// queued for e's key in a key shard, from the requests' records (exclusiveAhead), against the
// queue: the nearest exclusive request ahead of w (lastEx), or when there is none but an upgrade
// ahead (upAhead), an upgrade, or none. It follows the records without shortening them.
func (sh *shard) checkExclusiveAhead(e *keyEntry, w, lastEx *waiter, upAhead bool, key []byte) {
	x := w.exAhead
	for x != nil && x.left {
		x = x.exAhead
	}
	if x == nil {
		for u := e.head; u != nil && u != w && u.upgrade != nil; u = u.next {
			x = u
		}
	}
	switch {
	case lastEx != nil && x != lastEx:
		violated("a shared request's edge is to the exclusive request queued nearest ahead of it",
			"key %q: the record reads another", key)
	case lastEx == nil && upAhead && (x == nil || x.upgrade == nil || x.left):
		violated("a shared request's edge is to the exclusive request queued nearest ahead of it",
			"key %q: only upgrades are ahead, and the record reads none of them", key)
	case lastEx == nil && !upAhead && x != nil:
		violated("a shared request's edge is to the exclusive request queued nearest ahead of it",
			"key %q: nothing exclusive is ahead, and the record reads a request", key)
	}
}

// checkScheduler checks s's heap: each claim knows its place, none is due before its parent, each
// holds or waits for a key or range of sh, and the timer is armed no later than the earliest.
func (sh *shard) checkScheduler(s *scheduler) {
	for i, h := range s.heap {
		switch {
		case int(h.heapIdx) != i:
			violated("a scheduled claim knows its place in the heap", "place %d, recorded %d", i, h.heapIdx)
		case i > 0 && s.heap[(i-1)/2].dueAt() > h.dueAt():
			violated("a heap of deadlines is ordered", "place %d is due before its parent", i)
		case sh.tab.shard(h.hash) != sh || sh.scheduler(h.ten.clockID) != s:
			violated("a scheduled claim is of the shard and of the clock of its heap", "place %d", i)
		case h.w == nil && h.flags()&flagHeld == 0:
			violated("a scheduled claim holds or waits", "place %d", i)
		}
	}
	if len(s.heap) > 0 && (s.timer == nil || s.armedAt > s.heap[0].dueAt()) {
		violated("a scheduler's timer fires by its earliest deadline", "armed %v", s.timer != nil)
	}
}

// checkOrder checks that every entry of sh, a key shard, of a column family whose range space is
// ready is in the shard's order, pending or in its tree: a range request finds the keys inside
// it there (keyorder.go). Before the space is ready, bringOwnerWaits is still noting them.
func (sh *shard) checkOrder() {
	if sh.tab.spaces.Load() == nil {
		return
	}
	var pending map[*keyEntry]bool
	sh.index.all(func(e *keyEntry) {
		cf, key := e.record()
		sp := sh.tab.spaceOf(cf)
		if sp == nil {
			return
		}
		select {
		case <-sp.ready:
		default:
			return
		}
		if pending == nil {
			pending = make(map[*keyEntry]bool, len(sh.order.pending))
			for _, p := range sh.order.pending {
				pending[p] = true
			}
		}
		if pending[e] {
			return
		}
		if t := sh.order.tree; t != nil {
			if k, ok := t.Get(orderedKey{cf: cf, key: key}); ok && k.e == e {
				return
			}
		}
		violated("every entry of a column family with a range space is noted in its shard's order", "key %q", key)
	})
	if pending != nil && !sh.order.noted.Load() {
		violated("every entry of a column family with a range space is noted in its shard's order", "the shard is not marked noted")
	}
}

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
	sp.keys.Ascend(func(rk *rangedKey) bool {
		e := rk.e
		switch live := cv.live.Covers(rk.key); {
		case rk.space != sp || e.rangedKey != rk || sh.index.find(e.hash, cf, rk.key) != e:
			violated("a key brought in is an entry of its space's home shard", "key %q", rk.key)
		case live == (rk.retired != nil):
			violated("a key brought in is routed home by a live span or else by its retired span", "key %q: live %v", rk.key, live)
		case rk.retired != nil:
			n, ok := orphans[rk.retired]
			if !ok || !spanContains(rk.retired.Start, rk.retired.End, rk.key) {
				violated("a key brought in is routed home by a live span or else by its retired span",
					"key %q: its retired span is not in the cover or does not hold it", rk.key)
			}
			orphans[rk.retired] = n + 1
		}
		return true
	})
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
	sp.keys.Ascend(func(rk *rangedKey) bool {
		for ; next < len(locks) && spans.Compare(locks[next].key(), rk.key) <= 0; next++ {
			add(locks[next])
		}
		holders = rk.e.appendHolders(holders[:0])
		for _, y := range holders {
			if x := meets(y, rk.key); x != nil {
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

// describe is h as a violation names it: its key or span, mode, owner and state.
func describe(h *Claim) string {
	f := h.flags()
	what := fmt.Sprintf("key %q", h.key())
	if f&flagRange != 0 {
		what = fmt.Sprintf("range [%q, %q)", h.key(), h.cold.span.End)
	}
	mode := "exclusive"
	if f&flagShared != 0 {
		mode = "shared"
	}
	owner := "no owner"
	if h.owner != nil {
		owner = "owner " + h.owner.Name()
	}
	return fmt.Sprintf("%s %s of %s (held %v, released %v, expired %v, fencing %v)", what, mode, owner,
		f&flagHeld != 0, f&flagReleased != 0, f&flagExpired != 0, f&flagFencing != 0)
}

// endsAfter reports whether a span that ends at end (nil: no bound) holds keys after at.
func endsAfter(end, at []byte) bool { return end == nil || spans.Compare(at, end) < 0 }

// sameOwner reports whether a and b are locks granted to one owner, which never conflict: their
// owner's, or for a lock that outlived its owner (Disown), the owner it had. Two locks of a Txn
// that overlap both outlive it with Hold, with no owner; they were granted as one owner's.
func sameOwner(a, b *Claim) bool {
	o := grantedTo(a)
	return o != nil && o == grantedTo(b)
}

// grantedTo is the owner h was granted to: its owner, or the one it had before Disown.
func grantedTo(h *Claim) Owner {
	if h.owner != nil {
		return h.owner
	}
	c := &h.ten.tab.checks
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.formerOwner[h]
}

// tableChecks is what the checker keeps of a table beyond its state: the owner each claim had
// before Disown, for sameOwner. It has a mutex of its own: a claim is disowned under its shard's
// mutex, and read under the home shard's once its key was brought in there.
type tableChecks struct {
	mu          sync.Mutex
	formerOwner map[*Claim]Owner
}

// disowned records the owner of h, with h's shard mutex held, as Disown takes it away.
func (c *tableChecks) disowned(h *Claim) {
	if h.owner == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.formerOwner == nil {
		c.formerOwner = map[*Claim]Owner{}
	}
	c.formerOwner[h] = h.owner
}

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

// checkLocked checks what g keeps, with g.mu held, as it is about to be released: each owner
// waits with a claim of its own, and the count that give-backs read without g.mu is right. It
// takes each waiting claim's shard mutex to read its owner, as a search does.
func (g *waitGraph) checkLocked() {
	if int(g.count.Load()) != len(g.waiting) {
		violated("the wait-for graph counts its waiting owners", "count %d, %d waiting", g.count.Load(), len(g.waiting))
	}
	for k, h := range g.waiting {
		sh := h.lockShard()
		ok := keyOf(h.owner) == k
		sh.mu.Unlock()
		if !ok {
			violated("the wait-for graph's waiting owners wait with their own claims", "a claim of another owner")
		}
	}
}

// A range lock's span is the first field of its span, and a retiring span the first of its
// retiredSpan: checkCover and checkKeysBroughtIn find them from the cover's spans so.
var _ = [1]struct{}{}[unsafe.Offsetof(span{}.Span)+unsafe.Offsetof(retiredSpan{}.Span)]
