package recordlock

import (
	"context"
	"sync"
	"time"
	"unsafe"
)

// shard is one mutex's worth of the table. Every field of every entry, waiter and scheduler of
// the shard, and the fields of Handle that its comment marks, are guarded by mu.
type shard struct {
	shardState
	// Keeps the state of neighbouring shards, which goroutines on different keys write at once,
	// out of each other's cache lines, and keeps every shard on a falseSharingRange boundary.
	_ [shardPad]byte
}

// shardPad rounds a shard up to a multiple of falseSharingRange with at least falseSharingRange
// to spare.
const shardPad = (unsafe.Sizeof(shardState{})+2*falseSharingRange-1)/falseSharingRange*falseSharingRange -
	unsafe.Sizeof(shardState{})

// shardState is laid out for an uncontended Lock and Release, which touch four of its cache
// lines: the first (the mutex, the spare entries, the index's header), the index's own slots, the
// first scheduler's heap and timer, and one of the own entries (a test checks the layout).
type shardState struct {
	mu sync.Mutex
	// Entries no key uses, kept for reuse and linked by nextSpare: the shard's own, and a few
	// allocated ones, which are let go once the shard is idle.
	spareOwn *keyEntry
	spare    *keyEntry
	nSpare   int
	index    entryTable
	// The schedulers of the table's clock slots: slot 0's inside the shard, the others allocated.
	firstSched scheduler
	// Counted by every Lock and Release, in the cache line of the first scheduler's clock, which
	// both read anyway.
	acquired uint64
	held     int
	// tab is the table the shard is part of: a grant mints AcquiredAt from its database's
	// timestamps.
	tab        *table
	moreScheds []*scheduler // slot 1 and up; nil where the slot is free
	// ownEntries are the entries a shard uses first: a shard with a key or two at a time keeps
	// them in its own cache lines rather than in small objects that neighbour other shards'.
	ownEntries [2]keyEntry
	hooks      []pendingHook // release hooks and debug records to run once mu is released
	counts     shardCounts   // what only contended and failing calls count
}

// maxSpare bounds the allocated entries a busy shard keeps for reuse, so that keys coming and
// going do not allocate.
const maxSpare = 16

// bargeWindow is how long the oldest waiter of a freed key may be passed over by newcomers; past
// it, the key is handed to that waiter directly.
const bargeWindow = time.Millisecond

// pendingHook is a release hook, or a debug record (note), to run once the shard mutex is
// released.
type pendingHook struct {
	h    *Handle
	fn   func() error
	note func()
}

// init makes the shard part of t and its own entries spare, before the table is used.
func (sh *shard) init(t *table) {
	sh.tab = t
	for i := range sh.ownEntries {
		e := &sh.ownEntries[i]
		e.nextSpare, sh.spareOwn = sh.spareOwn, e
	}
}

func (sh *shard) lookup(h *Handle) *keyEntry { return sh.index.find(h.hash, h.cf, h.key()) }

// acquire takes h's key, or with wait queues for it until it is granted, the timeout passes, ctx
// is done or h's Locker closes; a grant that raced with Close returns errGrantedAfterClose with
// the key held. It returns the Mono reading the attempt started at, from which the lease and the
// wait are measured.
func (sh *shard) acquire(ctx context.Context, h *Handle, lease, timeout time.Duration, wait bool) (time.Duration, error) {
	c := h.tenant()
	// Read before the mutex, which keeps the read out of the critical section every Lock and
	// Release of the shard queues behind. The lease is measured from this reading, so it can only
	// be shorter for the time spent waiting for the mutex, and timers are armed from a fresh one.
	wall, mono := readClock(c.clock)
	sh.mu.Lock()
	if c.closed.Load() {
		sh.mu.Unlock()
		return 0, ErrClosed
	}
	e := sh.lookup(h)
	if e != nil && e.holder != nil && e.holder.settleFor(sh, c, mono) {
		e = sh.lookup(h) // settling may have emptied and removed the entry
	}
	switch {
	case e == nil:
		e = sh.newEntry(h.hash)
		sh.grant(e, h, wall, mono, lease)
		sh.index.insert(e)
	case e.holder == nil && (e.head == nil || !e.head.pastBargeWindow(c, mono)):
		sh.grant(e, h, wall, mono, lease)
	case !wait:
		sh.unlockAndRunHooks()
		return 0, ErrLocked
	default:
		return mono, sh.wait(ctx, e, h, lease, mono+timeout, mono)
	}
	sh.unlockAndRunHooks()
	return mono, nil
}

// grant makes h the holder of e and starts its lease at the given readings of h's clock (wall in
// Unix nanoseconds). The deadline goes on a timer only if a waiter is already queued (see
// watch).
func (sh *shard) grant(e *keyEntry, h *Handle, wall int64, mono, lease time.Duration) {
	e.holder = h
	h.e = e
	h.acquiredAt = sh.tab.db.stamps.mint(wall)
	h.expiresAt = wall + int64(lease)
	h.deadline.Store(int64(mono + lease))
	h.setFlags(flagHeld)
	sh.acquired++
	sh.held++
	if e.head != nil {
		sh.schedule(h)
	}
}

// watch arms h's lease deadline on its clock's timer, if it is not armed yet, once someone can
// observe the lease ending: a waiter queues for its key, Done is called, or a release hook is set.
// Until then nothing can tell a lapse settled at the deadline from one settled when the handle or
// its key is next looked at (docs/DESIGN.md §7), so an uncontended lock costs no scheduling.
func (sh *shard) watch(h *Handle) {
	if h.heapIdx < 0 && h.flags()&flagExpired == 0 {
		sh.schedule(h)
	}
}

// giveBack ends h's ownership of its key, setting the flags in set with the same store, and
// passes the key on.
func (sh *shard) giveBack(h *Handle, set handleFlags) {
	e := h.e
	if e == nil || e.holder != h {
		h.setFlags(set)
		sh.tab.logFault(h.tenant(), "a handle gave back a key it did not hold")
		return
	}
	h.state.Store(h.flags()&^flagHeld | set)
	h.e = nil // the entry may be reused once the key leaves the table
	e.holder = nil
	sh.held--
	sh.passOn(e)
}

// passOn serves a key that just became free: the oldest waiter gets it directly once it has
// waited bargeWindow; before that it is woken to compete with newcomers. Waiters of a closed
// Locker are failed, never granted. A key with no waiters leaves the table.
func (sh *shard) passOn(e *keyEntry) {
	if e.holder != nil || e.wakePending {
		return
	}
	for w := e.head; w != nil; w = e.head {
		c := w.h.tenant()
		if c.closed.Load() {
			sh.dequeue(e, w)
			sh.unschedule(w.h)
			w.h.e = nil
			w.finish(waitClosed)
			continue
		}
		wall, mono := readClock(c.clock)
		if w.pastBargeWindow(c, mono) {
			sh.dequeue(e, w)
			sh.unschedule(w.h)
			sh.countWait(w, mono)
			sh.grant(e, w.h, wall, mono, w.lease)
			w.finish(waitGranted)
			return
		}
		e.wakePending = true
		w.state = waitWoken
		w.signal()
		return
	}
	sh.remove(e)
}

// expire ends h's lease: it stops authorizing writes at once, and the key passes on now or, when
// h is inside Fence, as soon as the commit returns.
func (sh *shard) expire(h *Handle) {
	if h.flags()&flagExpired != 0 {
		return
	}
	h.setFlags(flagExpired)
	sh.unschedule(h)
	h.closeDone()
	if h.flags()&flagHeld == 0 {
		return
	}
	sh.counts.lapsed++
	sh.noteLapse(h)
	if h.flags()&flagFencing != 0 {
		h.setFlags(flagPassOnAfterFence)
		return
	}
	sh.giveBack(h, 0)
	sh.queueHook(h)
}

// countWait counts the grant of w, which waited until mono, a reading of its Locker's clock.
func (sh *shard) countWait(w *waiter, mono time.Duration) {
	sh.counts.contended++
	sh.counts.waitTime += mono - w.since
}

// evict fails c's queued waiters with ErrClosed and appends the handles of c holding a key here
// to held.
func (sh *shard) evict(c *tenant, held []*Handle) []*Handle {
	// Collect first: failing a waiter can pass its key on or take its entry out of the index.
	var entries []*keyEntry
	sh.index.all(func(e *keyEntry) { entries = append(entries, e) })
	for _, e := range entries {
		if e.holder != nil && e.holder.tenant() == c {
			held = append(held, e.holder)
		}
		var mine []*waiter
		for w := e.head; w != nil; w = w.next {
			if w.h.tenant() == c {
				mine = append(mine, w)
			}
		}
		for _, w := range mine {
			if w.h.w == w { // still queued: passOn may have failed it already
				sh.abandon(w, waitClosed)
			}
		}
	}
	return held
}

// queueHook moves h's release hook, if any, to the list run after mu is released.
func (sh *shard) queueHook(h *Handle) {
	if h.cold == nil || h.cold.hook == nil {
		return
	}
	sh.hooks = append(sh.hooks, pendingHook{h: h, fn: h.cold.hook})
	h.cold.hook = nil
}

// newEntry returns an empty entry for a key of the given hash, reusing a spare one if it can.
func (sh *shard) newEntry(hash uint64) *keyEntry {
	e := sh.spareOwn
	switch {
	case e != nil:
		sh.spareOwn = e.nextSpare
	case sh.spare != nil:
		e = sh.spare
		sh.spare = e.nextSpare
		sh.nSpare--
	default:
		return &keyEntry{hash: hash}
	}
	e.nextSpare, e.hash = nil, hash
	return e
}

// owns reports whether e is one of the shard's own entries.
func (sh *shard) owns(e *keyEntry) bool {
	for i := range sh.ownEntries {
		if e == &sh.ownEntries[i] {
			return true
		}
	}
	return false
}

// remove takes e, which has neither holder nor waiters, out of the table and keeps it for reuse.
// Once no key of the shard is held or waited on, the shard holds no allocated entry: a table
// whose keys come and go returns to its idle size.
func (sh *shard) remove(e *keyEntry) {
	sh.index.remove(e)
	// e has no holder and no waiters, so its pointers are nil already but for the link.
	e.wakePending = false
	switch {
	case sh.owns(e):
		e.nextSpare, sh.spareOwn = sh.spareOwn, e
	case sh.nSpare < maxSpare:
		e.nextSpare, sh.spare = sh.spare, e
		sh.nSpare++
	}
	if sh.index.n == 0 {
		sh.spare, sh.nSpare = nil, 0
	}
}

// drainHooks hands the release hooks collected under mu to the caller, to run once mu is released.
func (sh *shard) drainHooks() []pendingHook {
	hs := sh.hooks
	if hs != nil { // most critical sections queue no hook: no store, no write barrier
		sh.hooks = nil
	}
	return hs
}

func runHooks(hs []pendingHook) {
	for _, p := range hs {
		if p.note != nil {
			p.note()
			continue
		}
		p.h.tenant().runHook(p.fn)
	}
}

// unlockAndRunHooks releases mu and then runs the hooks collected while it was held.
func (sh *shard) unlockAndRunHooks() {
	hs := sh.drainHooks()
	sh.mu.Unlock()
	runHooks(hs)
}
