package recordlock

import (
	"bytes"
	"sync"
	"time"
)

// waitGraph finds deadlocks among the Txns of one database (docs/DESIGN.md §13). A Txn waits for
// at most one record at a time (a Txn is used by one goroutine), so the graph records, per
// waiting Txn, the handle it waits with. Its edges are read from the table when a cycle is
// looked for: a waiting Txn waits for the Txn that holds its record and for every Txn queued for
// that record ahead of it. A holder outside any Txn, or a Txn that ended, ends a path: leases and
// timeouts settle those waits.
//
// A Txn enters the graph after its waiter is queued, and entering and the search for a cycle
// through it happen under one mutex. So of two Txns that start waiting for each other at the same
// instant, the second to enter finds the cycle and the first does not: exactly one fails. Every
// edge appears either when a Txn enters (and is checked then) or when a Txn that is not waiting
// takes a record (so no cycle runs through it until it waits, and is checked then).
type waitGraph struct {
	mu      sync.Mutex // taken before any shard mutex, never under one
	waiting map[*Txn]*Handle
}

// enter records that h's Txn waits with h, which is queued in sh, unless that would close a
// cycle: then h's waiter is taken out of the queue and the error names the cycle.
func (g *waitGraph) enter(sh *shard, h *Handle) error {
	err, waiters, holderAge := g.check(sh, h)
	if err != nil {
		h.tenant().logDeadlock(h, err, waiters, holderAge) // outside every mutex: the logger is the user's
		return err
	}
	return nil
}

// check is enter under the graph's mutex. For a deadlock it also returns, for the debug record,
// how many other calls were queued for h's key and how long its holder had held it.
func (g *waitGraph) check(sh *shard, h *Handle) (err *DeadlockError, waiters int, holderAge time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.waiting == nil {
		g.waiting = map[*Txn]*Handle{}
	}
	g.waiting[h.owner] = h
	cycle := g.cycleThrough(h.owner)
	if cycle == nil {
		return nil, 0, 0
	}
	delete(g.waiting, h.owner)
	sh.mu.Lock()
	w := h.w
	if w == nil { // granted, timed out or closed since: the wait loop reports it
		sh.mu.Unlock()
		return nil, 0, 0
	}
	for q := h.e.head; q != nil; q = q.next {
		if q != w {
			waiters++
		}
	}
	if hd := h.e.holder; hd != nil {
		holderAge = time.Duration(h.tenant().clock.Now().UnixNano() - int64(hd.acquiredAt))
	}
	sh.abandon(w, waitDeadlock)
	sh.unlockAndRunHooks()
	return &DeadlockError{Cycle: cycle}, waiters, holderAge
}

// leave records that h's Txn no longer waits.
func (g *waitGraph) leave(h *Handle) {
	g.mu.Lock()
	if g.waiting[h.owner] == h {
		delete(g.waiting, h.owner)
	}
	g.mu.Unlock()
}

// blockers returns the Txns that t, waiting with h, waits for now: the Txn holding h's record and
// the Txns queued for it ahead of h. It is empty once h no longer waits.
func (g *waitGraph) blockers(t *Txn, h *Handle, out []*Txn) []*Txn {
	sh := h.shard()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	w := h.w
	if w == nil || h.e == nil {
		return out
	}
	add := func(o *Txn) {
		if o != nil && o != t {
			out = append(out, o)
		}
	}
	if hd := h.e.holder; hd != nil {
		add(hd.owner)
	}
	for ahead := h.e.head; ahead != nil && ahead != w; ahead = ahead.next {
		add(ahead.h.owner)
	}
	return out
}

// cycleThrough returns the cycle of waits from start back to start, or nil. It searches depth
// first from start over the Txns that are waiting; every step reads one shard under its mutex.
func (g *waitGraph) cycleThrough(start *Txn) []DeadlockWait {
	parent := map[*Txn]*Txn{start: nil}
	stack := []*Txn{start}
	var next []*Txn
	for len(stack) > 0 {
		t := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		h := g.waiting[t]
		if h == nil {
			continue
		}
		next = g.blockers(t, h, next[:0])
		for _, b := range next {
			if b == start {
				return g.describe(parent, t)
			}
			if _, seen := parent[b]; seen || g.waiting[b] == nil {
				continue
			}
			parent[b] = t
			stack = append(stack, b)
		}
	}
	return nil
}

// describe lists the cycle that ends with last waiting for the start of the search, from the
// start.
func (g *waitGraph) describe(parent map[*Txn]*Txn, last *Txn) []DeadlockWait {
	var path []*Txn
	for t := last; t != nil; t = parent[t] {
		path = append(path, t)
	}
	cycle := make([]DeadlockWait, 0, len(path))
	for i := len(path) - 1; i >= 0; i-- {
		t := path[i]
		h := g.waiting[t]
		cycle = append(cycle, DeadlockWait{Txn: t.Name(), ColumnFamilyID: h.cf, Key: bytes.Clone(h.key())})
	}
	return cycle
}
