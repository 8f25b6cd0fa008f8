//go:build invariants

package locktable

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/recordlock/recordlock/internal/spans"
)

// The checker of a build with the tag invariants (internal/invariants): as a shard's mutex is
// about to be released after a change (drainDeferred), it checks what the code assumes of the
// shard's entries, queues, schedulers and range spaces, the Invariants blocks of keyEntry, Claim
// and rangeSpace (the spaces' checks are rangespace_check.go's); as the wait-for graph's mutex
// is, what the graph keeps (waitGraph, waitgraph_check.go). Each check
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
	case (e.space != nil) != home || (e.keyClaim != nil) != home:
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
		if e.shares != 0 || len(e.others()) != 0 {
			violated("a free key has no sharer", "key %q: shares %d, %d sharers", key, e.shares, len(e.others()))
		}
		return 0
	case e.shares == 0:
		if len(e.others()) != 0 || e.holder.flags()&flagShared != 0 {
			violated("a key held exclusively has one holder, not shared",
				"key %q: %d sharers, holder shared %v", key, len(e.others()), e.holder.flags()&flagShared != 0)
		}
	case int(e.shares) != 1+len(e.others()):
		violated("a key held shared counts its sharers", "key %q: shares %d, holder and %d sharers", key, e.shares, len(e.others()))
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
		case (f&flagInHomeShard != 0) != (e.space != nil):
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
	// pastPassers: a request that passes none is ahead (rangepass.go), so no upgrade may follow
	// (upgradeOf)
	upAhead, pastUpgrades, pastPassers := false, false, false
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
		case w.upgrade != nil && pastPassers:
			violated("upgrades are queued ahead of every request but those of owners that held locks", "key %q", key)
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
		if w.upgrade == nil && w.h.flags()&flagOwnerHolds == 0 {
			pastPassers = true
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
