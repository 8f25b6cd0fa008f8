package locktable

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"

	"github.com/recordlock/recordlock/internal/invariants"
)

// waitGraph finds deadlocks among the Txns of one database (docs/DESIGN.md §13). A Txn waits for
// at most one record at a time (a Txn is used by one goroutine), so the graph records, per
// waiting Txn, the handle it waits with. Its edges are read from the table when a cycle is
// looked for: a waiting Txn waits for the Txns whose holds on its record conflict with its
// request, and a shared request also for those it cannot pass in the queue (blockers). A holder
// outside any Txn, or a Txn that ended, ends a path: leases and timeouts settle those waits.
//
// A Txn enters the graph after its waiter is queued, and entering and the search for a cycle
// through it happen under one mutex. So of two Txns that start waiting for each other at the same
// instant, the second to enter finds the cycle and the first does not: exactly one fails. An edge
// into a Txn appears when it takes a record, and then it is not waiting (a wait ends, under the
// shard mutex, when its record is granted), so no cycle runs through it until it waits again and
// is checked then; or when a shared request's edge moves past a Txn's exclusive request that left
// the queue ungranted to the next one ahead, which may be waiting: that request is woken to enter
// again (recheckBehind), so a move that closes or keeps a cycle is checked as a new wait is.
//
// Invariants, whenever mu is released (a build with the tag invariants checks them there:
// shard_check.go): waiting maps each waiting owner to a claim of its own, and count is its
// size. The edges are read from the queues, and what the queues remember of them (a shared
// request's exclusiveAhead, a range request's runHead) is checked with the queues' invariants
// (keyEntry, rangeSpace).
type waitGraph struct {
	mu      sync.Mutex // taken before any shard mutex, never under one
	waiting map[ownerKey]*Claim
	// count is len(waiting), read without mu by give-backs in home shards (ownerLetGo).
	count atomic.Int32

	// edgesRead counts the edges every search so far has read; guarded by mu. Tests bound the
	// cost of a search with it.
	edgesRead invariants.Counter
	// skipped counts the requests that had left the queue which searches stepped over to find
	// the exclusive request ahead of a shared one; guarded by mu. Tests bound it too.
	skipped invariants.Counter
	// rangeSteps counts the steps searches took in the range sets of column families in range
	// mode to read their edges (rangeSet.steps); guarded by mu. Tests bound it too.
	rangeSteps invariants.Counter

	// The search's scratch space, reused by the next search; guarded by mu.
	parent      map[ownerKey]Owner
	stack, next []Owner
}

// enter records that h's owner waits with h, which is queued, unless that would close a
// cycle: then h's waiter is taken out of the queue and the error names the cycle, with, for the
// debug record, how many other requests were queued for h's key and how long its holder (the
// first, when it is held shared) had held it.
func (g *waitGraph) enter(h *Claim) error {
	g.mu.Lock()
	if g.waiting == nil {
		g.waiting = map[ownerKey]*Claim{}
	}
	g.waiting[keyOf(h.owner)] = h
	g.count.Store(int32(len(g.waiting)))
	cycle := g.cycleThrough(h.owner)
	if cycle == nil {
		g.checkLocked()
		g.mu.Unlock()
		return nil
	}
	delete(g.waiting, keyOf(h.owner))
	g.count.Store(int32(len(g.waiting)))
	sh := h.lockShard()
	w := h.w
	if w == nil { // granted, timed out or closed since: the wait loop reports it
		sh.mu.Unlock()
		g.checkLocked()
		g.mu.Unlock()
		return nil
	}
	err := &DeadlockError{Cycle: cycle}
	if e := h.e; e != nil { // a range request has no key entry, and leaves both figures zero
		err.Waiters = e.queued() - 1 // w is still queued
		if hd := e.holder; hd != nil {
			err.HolderAge = time.Duration(h.ten.clock.Now().UnixNano() - hd.acquiredAt)
		}
	}
	sh.abandon(w, waitDeadlock)
	// The calls deferred run once mu is released too: one may check another wait (recheckOwner).
	hs := sh.drainDeferred()
	sh.mu.Unlock()
	g.checkLocked()
	g.mu.Unlock()
	runDeferred(hs)
	return err
}

// leave records that h's Txn no longer waits.
func (g *waitGraph) leave(h *Claim) {
	g.mu.Lock()
	if k := keyOf(h.owner); g.waiting[k] == h {
		delete(g.waiting, k)
		g.count.Store(int32(len(g.waiting)))
	}
	g.checkLocked()
	g.mu.Unlock()
}

// recheckOwner wakes the request o waits with, if o waits, to look for a cycle through it again,
// as a new wait is checked: a lock of o ended, so o's request may no longer pass a request that
// waited for it (rangepass.go), and the edge to that one may close a cycle.
func (g *waitGraph) recheckOwner(o Owner) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.waiting[keyOf(o)]
	if h == nil {
		return
	}
	sh := h.lockShard()
	if w := h.w; w != nil && !w.recheck {
		w.recheck = true
		w.signal()
	}
	sh.mu.Unlock()
}

// blockers appends to out the Txns that t, waiting with h, waits for now, and returns it, with g.mu
// held (docs/DESIGN.md §15.5): the Txns holding h's record in a mode that conflicts with h's
// request (every other holder for an exclusive request or an upgrade, an exclusive holder for a
// shared one) and, for a shared request, the Txn of the nearest exclusive request of a Txn queued
// ahead of it and, when the nearest exclusive request ahead has no owner, every holder: requests
// are served in order, so h passes neither. That is at most one edge per holder plus one. It
// appends nothing once h no longer waits.
//
// There is no other edge to the requests queued ahead of h: an exclusive request waits for the
// same holders as those ahead of it, so a cycle through one of them also runs through a holder,
// and the search reads one edge per holder instead of one per request queued. A shared request
// conflicts with no holder of a record held shared, which is why it needs the edge to the
// exclusive request it queued behind; that one waits for the rest.
func (g *waitGraph) blockers(t Owner, h *Claim, out []Owner) []Owner {
	sh := h.lockShard()
	defer sh.mu.Unlock()
	if h.w == nil || (h.e == nil && h.w.space == nil) {
		return out
	}
	w, e := h.w, h.e
	// A holder whose lease has passed holds nothing any more, though nobody may have settled it
	// yet: its timer, armed as the request queued, passes the key on.
	b := edgeList{t: t, ten: h.ten, now: h.ten.clock.Mono(), out: out}
	if w.space != nil || e.space != nil {
		g.rangeSteps.Add(b.addRangeEdges(h, w))
		if w.space != nil {
			return b.out
		}
	}
	switch {
	case e.holder == nil:
	case !w.shared:
		b.addHolder(e.holder)
		for _, s := range e.others() {
			b.addHolder(s)
		}
	case e.heldExclusively():
		b.addHolder(e.holder)
	}
	if w.shared {
		x, skipped := e.exclusiveAhead(w)
		g.skipped.Add(uint64(skipped))
		if x != nil && x.h.owner == nil {
			// x needs every holder gone, and w is granted after it.
			if !e.heldExclusively() && e.holder != nil {
				b.addHolder(e.holder)
				for _, s := range e.others() {
					b.addHolder(s)
				}
			}
			x, skipped = e.ownedExclusiveAhead(x)
			g.skipped.Add(uint64(skipped))
		}
		if x != nil {
			b.add(x.h.owner)
		}
	}
	return b.out
}

// edgeList collects the owners that t, waiting, waits for (blockers), as read at now on the
// clock of ten, t's request's tenant. A method value of it is made only for the edges in range spaces
// (addRangeEdges), so that a key's search allocates nothing.
type edgeList struct {
	t   Owner
	ten *Tenant
	now time.Duration
	out []Owner
}

// add adds o, unless it is none or t itself.
func (b *edgeList) add(o Owner) {
	if o != nil && o != b.t {
		b.out = append(b.out, o)
	}
}

// addThrough adds o, unless it is none: what a request of no owner ahead passes on may lead back
// to t itself.
func (b *edgeList) addThrough(o Owner) {
	if o != nil {
		b.out = append(b.out, o)
	}
}

// addHolder adds the owner of x unless x's lease has passed.
func (b *edgeList) addHolder(x *Claim) {
	if !x.lapsedAt(x.monoFor(b.ten, b.now)) {
		b.add(x.owner)
	}
}

// addThroughHolder is addThrough of the owner of x unless x's lease has passed.
func (b *edgeList) addThroughHolder(x *Claim) {
	if !x.lapsedAt(x.monoFor(b.ten, b.now)) {
		b.addThrough(x.owner)
	}
}

// addRangeEdges adds the edges of w, h's waiting request, by the rule of range spaces
// (rangegraph.go), and returns the steps it took in the space's range set.
// The sink's functions are bound to a copy of b, so that b itself stays where its caller made it.
func (b *edgeList) addRangeEdges(h *Claim, w *waiter) (steps uint64) {
	r := new(edgeList)
	*r = *b
	sink := &rangeEdgeSink{owner: r.add, through: r.addThrough, holder: r.addHolder, throughHolder: r.addThroughHolder}
	sp := w.space
	if sp == nil {
		sp = h.e.space
	}
	before := sp.ranges.steps()
	sp.rangeEdges(h, w, sink)
	b.out = r.out
	return sp.ranges.steps() - before
}

// cycleThrough returns the cycle of waits from start back to start, or nil, with g.mu held. It
// searches depth
// first from start over the Txns that are waiting; every step reads one shard under its mutex.
func (g *waitGraph) cycleThrough(start Owner) []Wait {
	if g.parent == nil {
		g.parent = map[ownerKey]Owner{}
	}
	defer g.resetSearch()
	parent := g.parent
	parent[keyOf(start)] = nil
	stack := append(g.stack[:0], start)
	for len(stack) > 0 {
		t := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		h := g.waiting[keyOf(t)]
		if h == nil {
			continue
		}
		g.next = g.blockers(t, h, g.next[:0])
		g.edgesRead.Add(uint64(len(g.next)))
		for _, b := range g.next {
			if b == start {
				return g.describe(parent, t)
			}
			k := keyOf(b)
			if _, seen := parent[k]; seen || g.waiting[k] == nil {
				continue
			}
			parent[k] = t
			stack = append(stack, b)
		}
	}
	g.stack = stack
	return nil
}

// resetSearch empties the search's scratch space for the next search, with g.mu held, dropping
// what a large search grew so that clearing it stays cheap.
func (g *waitGraph) resetSearch() {
	const keep = 64
	if len(g.parent) > keep {
		g.parent = nil
	} else {
		clear(g.parent)
	}
	if cap(g.stack) > keep {
		g.stack = nil
	}
	if cap(g.next) > keep {
		g.next = nil
	}
	clear(g.stack[:cap(g.stack)])
	clear(g.next[:cap(g.next)])
}

// describe lists the cycle that ends with last waiting for the start of the search, from the
// start, with g.mu held.
func (g *waitGraph) describe(parent map[ownerKey]Owner, last Owner) []Wait {
	var path []Owner
	for t := last; t != nil; t = parent[keyOf(t)] {
		path = append(path, t)
	}
	cycle := make([]Wait, 0, len(path))
	for i := len(path) - 1; i >= 0; i-- {
		t := path[i]
		h := g.waiting[keyOf(t)]
		cycle = append(cycle, Wait{Owner: t, CF: h.cf, Key: bytes.Clone(h.key())})
	}
	return cycle
}
