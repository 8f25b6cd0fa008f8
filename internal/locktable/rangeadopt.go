package locktable

import (
	"runtime"
	"slices"
	"sync/atomic"

	"github.com/recordlock/recordlock/internal/invariants"
)

// Bringing keys into the home shard (docs/DESIGN.md §17.1). A column family's keys live in their
// own shards, spread by hash, but for those a range lock or request covers: those are brought
// into the column family's home shard, where the ranges are, so that the grant rule of ranges
// and keys runs under one mutex. A range request publishes its span in the cover first, then
// brings in the keys inside it, a shard at a time; a key request reads the cover under its own
// shard's mutex, and goes to the home shard only when a span covers its key (routesHome,
// acquire.go). The shard mutex orders the two: either the range request's visit of the shard
// came after the key's request registered there, and brings it in, or the key's request read the
// cover after the span was published, and goes to the home shard itself. Either way no shard is
// stopped, and the keys no range covers never leave their shards.

// broughtBatch bounds the entries a range request brings in under one hold of a shard's mutex,
// so that a range over many held keys delays the other keys of their shards by one batch at most.
const broughtBatch = 64

// broughtScan bounds the slots of a shard's index a range request looks at under one hold of the
// shard's mutex.
const broughtScan = 1024

// sortBatch bounds the pending entries of a key shard's order a range request sorts in under one
// hold of the shard's mutex: an insert into the order's btree costs about what a batch's move
// costs per entry, not what a look at an index slot costs.
const sortBatch = 128

// broughtSteps counts what bringing keys in did under one hold of a shard's mutex at most, for
// the tests that bound it (with the tag invariants; without it, it is empty).
type broughtSteps struct {
	maxLooked, maxMoved invariants.Max
	// maxRehashed is the slots of the home shard's index that a resize read under one hold of a
	// key shard's mutex, by a batch or by a key request that brings its key in (routeHomeLocked).
	maxRehashed invariants.Max
	holds       invariants.Counter
}

func (s *broughtSteps) note(looked, moved int) {
	s.maxLooked.Note(looked)
	s.maxMoved.Note(moved)
	s.holds.Inc()
}

// noteRehashed notes the slots of home's index that a resize read since it had before slots: the
// before, at least, if it has another number now.
func (s *broughtSteps) noteRehashed(home *shard, before int) {
	if len(home.index.slots) != before {
		s.maxRehashed.Note(before)
	}
}

// lockPair takes the mutexes of sh, a key shard, and home, a home shard: a key shard's first,
// the one order every path that holds two shards' mutexes takes them in.
func lockPair(sh, home *shard) {
	sh.mu.Lock()
	home.mu.Lock()
}

// bringIn brings into sp's home shard the entries of column family cf in [start, end) (end nil: no
// bound) that are still in their key shards, found in each shard's order (keyorder.go), a shard at
// a time, taking the mutexes itself: it is entered with none held. One hold of a shard's mutex
// sorts sortBatch pending items at most, then reads broughtBatch entries inside the span at most
// and brings them in, the home shard's index grown for them beforehand (growIndex), so that the
// other keys of the shard wait for one batch at most, however many keys it holds. The span is in
// sp's live cover already, so no entry in it is made outside the home shard meanwhile; a shard
// not noted is passed without its mutex, which routesHome makes safe.
func (sp *rangeSpace) bringIn(t *Table, cf uint32, start, end []byte) {
	home := sp.home
	var batch []*keyEntry
	for i := range KeyShards {
		sh := &t.shards[i]
		if !sh.order.noted.Load() {
			continue
		}
		sh.mu.Lock()
		if sh.order.empty() {
			sh.mu.Unlock()
			continue
		}
		sh.mu.Unlock()
		for {
			lockPair(sh, home)
			homeSlots := len(home.index.slots)
			done := false
			if sh.sortPending(sortBatch) {
				batch, done = sh.inSpan(cf, start, end, broughtBatch, batch[:0])
				if size := home.index.grownFor(len(batch)); size != 0 {
					clear(batch)
					growIndex(sh, home, len(batch), size)
					continue
				}
				sp.broughtSteps.note(0, len(batch))
				for _, e := range batch {
					_, key := e.record()
					sh.forget(cf, key)
					sp.orphanBrought(sh.moveEntry(home, e, sp))
				}
				clear(batch)
			}
			sp.broughtSteps.noteRehashed(home, homeSlots)
			sh.unlockAndRunDeferred()
			home.unlockAndRunDeferred()
			if done {
				break
			}
			t.ranges.hooks.yieldMutexes()
		}
	}
}

// growIndex lets go of the mutexes of sh, a key shard, and home, which it is entered with, and
// grows home's index to size slots if k more entries still need it to, taking home's mutex
// again alone; it returns with no mutex held. A batch brings its entries into the home shard
// under a key shard's mutex too, and growing the index there would make the other keys of that
// shard wait for a rehash of every key brought in before, up to all the column family's, and for
// the allocation of its slots: so a batch that would grow it lets both mutexes go, and the index
// grows here, its slots made with no mutex held and filled under home's alone, before the batch
// is read again. A batch then costs a key shard's mutex what its own entries cost. A key request
// that brings its own key in does the same (routeHomeLocked).
func growIndex(sh, home *shard, k, size int) {
	sh.unlockAndRunDeferred()
	home.unlockAndRunDeferred()
	slots := make([]*keyEntry, size)
	home.mu.Lock()
	if need := home.index.grownFor(k); need != 0 && need <= size {
		home.index.rehashInto(slots)
	}
	home.unlockAndRunDeferred()
}

// yieldMutexes lets a request that queued for a shard's mutex during a batch take it before the
// next batch does. A sync.Mutex lets the goroutine that unlocks it lock it again at once, before
// the waiter it woke has run, and hands it over only once that waiter has waited 1 ms: without
// this, a key request could wait a whole run of batches. A test takes a step of its own there
// instead (rangeHooks.betweenBatches).
func (k *rangeHooks) yieldMutexes() {
	if f := k.betweenBatches; f != nil {
		f()
		return
	}
	runtime.Gosched()
}

// bringOwnerWaits readies sp, just made, in every key shard, taking the mutexes itself (it is
// entered with none held): it notes the entries of column family cf made before (noteEntry), and
// brings into the home shard those for which an owner's request waits, as Acquire does for a
// request that waits once the space is made (takeBusyLocked). It reads a shard's entries from a
// copy of its index slots, taken under one hold of its mutex (a copy of the slots, not a look at
// each entry): between two holds, a removal shifts entries back in their probe run and a resize
// moves every one, so a walk of the live slots in batches could pass an entry by, and a range
// request would then miss it. An entry made after the copy is noted as it is made, since sp is in
// the table's map already (noteEntry). One hold of a shard's mutex then looks at broughtScan
// entries of the copy at most, each checked against the index, and brings in broughtBatch entries
// at most, the home shard's index grown for them beforehand (growIndex; the batch is checked
// again once both mutexes are back).
func (sp *rangeSpace) bringOwnerWaits(t *Table, cf uint32) {
	home := sp.home
	var before, batch []*keyEntry
	for i := range KeyShards {
		sh := &t.shards[i]
		sh.mu.Lock()
		before = append(before[:0], sh.index.slots...)
		sh.mu.Unlock()
		for at := 0; at < len(before); {
			lockPair(sh, home)
			batch = batch[:0]
			from, stop := at, min(at+broughtScan, len(before))
			for ; at < stop && len(batch) < broughtBatch; at++ {
				e := before[at]
				if e == nil || !sh.holdsEntryOf(e, cf) {
					continue
				}
				sh.noteEntry(e)
				if ownerWaitsIn(e) {
					batch = append(batch, e)
				}
			}
			homeSlots := len(home.index.slots)
			for size := home.index.grownFor(len(batch)); size != 0; size = home.index.grownFor(len(batch)) {
				growIndex(sh, home, len(batch), size)
				lockPair(sh, home)
				homeSlots = len(home.index.slots)
				batch = slices.DeleteFunc(batch, func(e *keyEntry) bool { return !sh.holdsEntryOf(e, cf) || !ownerWaitsIn(e) })
			}
			sp.broughtSteps.note(at-from, len(batch))
			for _, e := range batch {
				sp.orphanBrought(sh.moveEntry(home, e, sp))
			}
			sp.broughtSteps.noteRehashed(home, homeSlots)
			sh.unlockAndRunDeferred()
			home.unlockAndRunDeferred()
			if at < len(before) {
				t.ranges.hooks.yieldMutexes()
			}
		}
		clear(before)
	}
}

// holdsEntryOf reports whether e, read from a copy of sh's index slots, is still an entry of sh,
// of column family cf: it may have left, or been made again for another record, since.
func (sh *shard) holdsEntryOf(e *keyEntry, cf uint32) bool {
	if e.holder == nil && e.head == nil {
		return false
	}
	ecf, key := e.record()
	return ecf == cf && sh.index.find(e.hash, ecf, key) == e
}

// ownerWaitsIn reports whether an owner's request waits for e, with e's shard's mutex held.
func ownerWaitsIn(e *keyEntry) bool {
	for w := e.head; w != nil; w = w.next {
		if w.h.owner != nil {
			return true
		}
	}
	return false
}

// moveEntry brings e, an entry of sp's column family in sh, a key shard, and its holders and
// waiters, into sp's home shard to, with both shards' mutexes held, and returns it as the home shard's index
// of keys holds it.
func (sh *shard) moveEntry(to *shard, e *keyEntry, sp *rangeSpace) *keyEntry {
	for w := e.head; w != nil; w = w.next {
		if w.h.owner != nil {
			sp.listed(w) // queued before a range covered its key
		}
	}
	ne := to.newEntry(routed(e.hash, sp.homeIdx))
	hash := ne.hash
	*ne = *e // its holders and queue, and what the entry knows of them
	ne.hash = hash
	ne.space, ne.keyClaim = sp, ne.firstClaim()
	move := func(h *Claim) {
		scheduled := h.heapIdx >= 0
		sh.unschedule(h)
		atomic.StoreUint64(&h.hash, routed(h.hash, sp.homeIdx))
		h.e = ne
		if scheduled {
			to.schedule(h)
		}
	}
	for _, h := range ne.appendHolders(nil) {
		move(h)
		h.setFlags(flagInHomeShard)
		sh.held--
		to.held++
	}
	for w := ne.head; w != nil; w = w.next {
		move(w.h)
		if w.counted {
			sh.counts.waiting--
			to.counts.waiting++
		}
	}
	*e = keyEntry{hash: e.hash} // emptied, as remove takes it
	sh.remove(e)
	to.index.insert(ne)
	sp.keys.ReplaceOrInsert(ne)
	return ne
}
