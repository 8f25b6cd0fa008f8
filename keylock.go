package recordlock

import (
	"hash/maphash"
	"path/filepath"
	"sync"
	"time"
	"unsafe"
)

// The key-lock table of one database: exclusive, ownerless, in memory, shared by every Locker of
// that database in the process. It is sharded by a 64-bit hash of the key so that Lockers on
// different keys rarely share a mutex, and each shard keeps the lease deadlines and wait timeouts
// of its keys in one heap per clock, served by a single timer armed for the earliest of them.

const (
	shardCount = 128 // a power of two
	// bargeWindow is how long the oldest waiter may be passed over by newcomers (SPEC §3).
	bargeWindow = time.Millisecond
	// shrinkAfter is the capacity above which a scheduler's heap array is let go once empty, so
	// that a table whose keys come and go returns to its idle size (a shard keeps at most this
	// many pointers' worth after a burst; below it, a shard whose load swings does not reallocate).
	shrinkAfter = 64
)

// registry maps a database's canonical path to its table.
var registry = struct {
	sync.Mutex
	tables map[string]*table
	// stamps outlive their tables, so a database's timestamps keep increasing when its last
	// Locker closes and a new one opens after the wall clock stepped back.
	stamps map[string]*timestampSource
}{tables: map[string]*table{}, stamps: map[string]*timestampSource{}}

type table struct {
	tableHeader
	// The header is read by every Lock and the shards are written; the padding also starts the
	// shards on a 128-byte boundary (a table is page-aligned), which the layout of shardState
	// counts on.
	_      [2*falseSharingRange - unsafe.Sizeof(tableHeader{})%falseSharingRange]byte
	shards [shardCount]shard
	coord  coordinatorSlot

	clocksMu sync.Mutex
	clocks   []clockSlot // a Locker's clockID indexes this

	faultOnce sync.Once // SPEC §5.9: a key-table fault is logged once per database
}

type tableHeader struct {
	path   string
	refs   int // Lockers using it; guarded by registry
	seed   maphash.Seed
	stamps *timestampSource
}

// canonicalPath names a database so that two handles of it agree.
func canonicalPath(name string) string {
	p, err := filepath.Abs(name)
	if err != nil {
		return filepath.Clean(name)
	}
	if resolved, err := filepath.EvalSymlinks(p); err == nil {
		return resolved
	}
	return p
}

// acquireTable returns the table of the database at path, creating it on first use.
func acquireTable(path string) *table {
	registry.Lock()
	defer registry.Unlock()
	t := registry.tables[path]
	if t == nil {
		stamps := registry.stamps[path]
		if stamps == nil {
			stamps = &timestampSource{}
			registry.stamps[path] = stamps
		}
		t = &table{tableHeader: tableHeader{path: path, seed: maphash.MakeSeed(), stamps: stamps}}
		for i := range t.shards {
			sh := &t.shards[i]
			sh.tab = t
			for j := range sh.ownEntries {
				sh.remove(&sh.ownEntries[j]) // not in the index: this only makes it spare
			}
		}
		registry.tables[path] = t
	}
	t.refs++
	return t
}

// releaseTable drops one reference; the last one removes the table and stops its timers.
func releaseTable(t *table) {
	registry.Lock()
	t.refs--
	last := t.refs == 0
	if last {
		delete(registry.tables, t.path)
	}
	registry.Unlock()
	if !last {
		return
	}
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.schedulers((*scheduler).disarm)
		sh.mu.Unlock()
	}
}

// clockSlot is one clock of the table's open Lockers; a slot nobody uses any more is reused.
type clockSlot struct {
	c    Clock
	refs int // open Lockers on c
}

// clockID returns the index of c among the clocks of this table's open Lockers, taking a
// reference that dropClock gives back.
func (t *table) clockID(c Clock) int {
	t.clocksMu.Lock()
	defer t.clocksMu.Unlock()
	free := -1
	for i, slot := range t.clocks {
		switch {
		case slot.refs > 0 && sameClock(slot.c, c):
			t.clocks[i].refs++
			return i
		case slot.refs == 0 && free < 0:
			free = i
		}
	}
	if free < 0 {
		t.clocks = append(t.clocks, clockSlot{})
		free = len(t.clocks) - 1
	}
	t.clocks[free] = clockSlot{c: c, refs: 1}
	return free
}

// dropClock gives back a reference taken by clockID, when a Locker closes. The last one stops and
// lets go of the clock's schedulers, so that Lockers that come and go with clocks of their own do
// not leave a scheduler per shard behind. The closed Locker has nothing scheduled any more: Close
// released its handles and failed its waiters first.
func (t *table) dropClock(id int) {
	t.clocksMu.Lock()
	defer t.clocksMu.Unlock()
	t.clocks[id].refs--
	if t.clocks[id].refs > 0 {
		return
	}
	t.clocks[id].c = nil
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.dropScheduler(id)
		sh.mu.Unlock()
	}
}

// sameClock compares two clocks without panicking on an incomparable implementation.
func sameClock(a, b Clock) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// hash is the table's hash of the record (cf, key). Column family 0, the default, hashes as
// the key alone.
func (t *table) hash(cf uint32, key []byte) uint64 {
	h := maphash.Bytes(t.seed, key)
	if cf != 0 {
		h ^= uint64(cf) * 0x9e3779b97f4a7c15 // spreads cf over every bit, the shard bits too
	}
	return h
}

func (t *table) shard(hash uint64) *shard { return &t.shards[hash&(shardCount-1)] }

// logFault reports a key-table inconsistency once per database (SPEC §5.9).
func (t *table) logFault(l *Locker, msg string) {
	t.faultOnce.Do(func() {
		l.log.Warn("recordlock: key table fault; the key was left as found", "db", t.path, "fault", msg)
	})
}

// falseSharingRange is how far apart memory written by different cores is kept: two cache lines,
// because many CPUs prefetch lines in aligned pairs and so move a neighbour's line along.
const falseSharingRange = 128

// shard is one mutex's worth of the table. Every field of every Handle and waiter whose key
// hashes here is guarded by mu.
type shard struct {
	shardState
	// Keeps the state of neighbouring shards, which goroutines on different keys write at once,
	// out of each other's cache lines, and keeps every shard on a 128-byte boundary (a test checks
	// both; unsafe.Sizeof cannot size it here, shardState refers back to table).
	_ [shardPad]byte
}

// shardPad rounds a shard up to 4*falseSharingRange with at least falseSharingRange to spare.
const shardPad = 4*falseSharingRange - 376

// shardState is laid out for an uncontended Lock and Release, which touch four of its cache
// lines: the first (the mutex, the index's header, the spare entries), the index's own slots, the
// first scheduler's heap and timer, and one of the own entries.
type shardState struct {
	mu  sync.Mutex
	tab *table
	// Entries no key uses, kept for reuse and linked by nextSpare: the shard's own, and a few
	// allocated ones, which are let go once the shard is idle.
	spareOwn *keyEntry
	spare    *keyEntry
	index    entryTable
	// The schedulers of the table's clocks, by clockID, each created on first use.
	firstSched scheduler
	nSpare     int
	moreScheds []*scheduler // clockID 1 and up
	// ownEntries are the entries a shard uses first: a shard with a key or two at a time keeps
	// them in its own cache lines rather than in small objects that neighbour other shards'.
	ownEntries [2]keyEntry
	hooks      []pendingHook
}

// maxSpare bounds the allocated entries a busy shard keeps for reuse, so that keys coming and
// going do not allocate.
const maxSpare = 16

// keyEntry is the table's record of one key that is held or waited on. Entries are reused within
// their shard, so that an uncontended Lock allocates only its Handle; nothing refers to an entry
// once it has left the table (the handles that used it were given back or gave up).
type keyEntry struct {
	hash        uint64
	holder      *Handle // nil while the key is free but waiters remain
	head, tail  *waiter
	nextSpare   *keyEntry
	wakePending bool // the head waiter was woken and has not yet looked at the key
}

// record is the entry's column family and key, as held by its holder or, while the key is free,
// its oldest waiter.
func (e *keyEntry) record() (uint32, []byte) {
	switch {
	case e.holder != nil:
		return e.holder.cf, e.holder.key
	case e.head != nil:
		return e.head.h.cf, e.head.h.key
	}
	return 0, nil
}

type pendingHook struct {
	h  *Handle
	fn func() error
}

func (sh *shard) lookup(h *Handle) *keyEntry { return sh.index.find(h.hash, h.cf, h.key) }

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
		p.h.l.runHook(p.fn)
	}
}

// unlockAndRunHooks releases mu and then runs the hooks collected while it was held.
func (sh *shard) unlockAndRunHooks() {
	hs := sh.drainHooks()
	sh.mu.Unlock()
	runHooks(hs)
}

// sched returns the scheduler of l's clock, creating it on first use. The first clock of the
// table, in practice the only one, has its scheduler inside the shard, one pointer less on every
// Lock and Release.
func (sh *shard) sched(l *Locker) *scheduler {
	if l.clockID == 0 {
		s := &sh.firstSched
		if s.clock == nil {
			s.sh, s.clock = sh, l.clock
		}
		return s
	}
	i := l.clockID - 1
	if i < len(sh.moreScheds) {
		if s := sh.moreScheds[i]; s != nil {
			return s
		}
	}
	for len(sh.moreScheds) <= i {
		sh.moreScheds = append(sh.moreScheds, nil)
	}
	s := &scheduler{sh: sh, clock: l.clock}
	sh.moreScheds[i] = s
	return s
}

// unschedule takes h out of its scheduler's heap, if it is in one. A handle that is not scheduled
// (every handle of a closed Locker) never looks its scheduler up, so it cannot bring back one
// that dropScheduler let go.
func (sh *shard) unschedule(h *Handle) {
	if h.heapIdx >= 0 {
		sh.sched(h.l).remove(h)
	}
}

// dropScheduler stops and forgets the scheduler of clock id, whose heap is empty. The first
// clock's scheduler is reset in place; its generation carries on, so a callback of its old timer
// that is already on its way finds it stale.
func (sh *shard) dropScheduler(id int) {
	if id == 0 {
		s := &sh.firstSched
		s.disarm()
		*s = scheduler{sh: sh, gen: s.gen}
		return
	}
	if i := id - 1; i < len(sh.moreScheds) && sh.moreScheds[i] != nil {
		sh.moreScheds[i].disarm()
		sh.moreScheds[i] = nil
	}
}

// schedulers calls f on every scheduler the shard has made.
func (sh *shard) schedulers(f func(*scheduler)) {
	if sh.firstSched.clock != nil {
		f(&sh.firstSched)
	}
	for _, s := range sh.moreScheds {
		if s != nil {
			f(s)
		}
	}
}

// grant makes h the holder of e and starts its lease at the given readings of h's clock (wall in
// Unix nanoseconds).
func (sh *shard) grant(e *keyEntry, h *Handle, wall int64, mono, lease time.Duration) {
	e.holder = h
	h.e = e
	h.acquiredAt = sh.tab.stamps.mint(wall)
	h.expiresAt = wall + int64(lease)
	h.deadline.Store(int64(mono + lease))
	h.setFlags(flagHeld)
	sh.sched(h.l).push(h, mono)
}

// giveBack ends h's ownership of its key, setting the flags in set with the same store, and
// passes the key on.
func (sh *shard) giveBack(h *Handle, set handleFlags) {
	e := h.e
	if e == nil || e.holder != h {
		h.setFlags(set)
		sh.tab.logFault(h.l, "a handle gave back a key it did not hold")
		return
	}
	h.state.Store(h.flags()&^flagHeld | set)
	h.e = nil // the entry may be reused once the key leaves the table
	e.holder = nil
	sh.passOn(e)
}

// passOn serves a key that just became free: the oldest waiter gets it directly once it has
// waited bargeWindow; before that it is woken to compete with newcomers. A key with no waiters
// leaves the table.
func (sh *shard) passOn(e *keyEntry) {
	if e.holder != nil || e.wakePending {
		return
	}
	w := e.head
	if w == nil {
		sh.remove(e)
		return
	}
	wall, mono := readClock(w.h.l.clock)
	if mono-w.since >= bargeWindow {
		sh.dequeue(e, w)
		sh.unschedule(w.h)
		sh.grant(e, w.h, wall, mono, w.lease)
		w.finish(waitGranted)
		return
	}
	e.wakePending = true
	w.state = waitWoken
	w.signal()
}

// settleLapsed completes the expiry of e's holder if its deadline has passed, so that a lapsed
// key is free before any timer runs (SPEC §3). A holder inside Fence keeps the key until its
// commit returns.
func (sh *shard) settleLapsed(e *keyEntry, mine *Locker, mono time.Duration) {
	h := e.holder
	if h == nil || h.flags()&flagExpired != 0 {
		return
	}
	now := mono
	if h.l.clockID != mine.clockID {
		now = h.l.clock.Mono()
	}
	if now >= time.Duration(h.deadline.Load()) {
		sh.expire(h)
	}
}

// expire ends h's lease: it stops authorizing writes at once, and the key passes on now or, when
// h is inside Fence, as soon as the commit returns.
func (sh *shard) expire(h *Handle) {
	if h.flags()&flagExpired != 0 {
		return
	}
	h.setFlags(flagExpired | flagReleased)
	sh.unschedule(h)
	h.closeDone()
	if h.flags()&flagHeld == 0 {
		return
	}
	if h.flags()&flagFencing != 0 {
		h.setFlags(flagPassOnAfterFence)
		return
	}
	sh.giveBack(h, 0)
	sh.queueHook(h)
}

// queueHook moves h's release hook, if any, to the list run after mu is released.
func (sh *shard) queueHook(h *Handle) {
	if h.cold == nil || h.cold.hook == nil {
		return
	}
	sh.hooks = append(sh.hooks, pendingHook{h: h, fn: h.cold.hook})
	h.cold.hook = nil
}

// enqueue appends w to e's wait queue.
func (sh *shard) enqueue(e *keyEntry, w *waiter) {
	w.prev = e.tail
	if e.tail != nil {
		e.tail.next = w
	} else {
		e.head = w
	}
	e.tail = w
}

// dequeue unlinks w from e's wait queue.
func (sh *shard) dequeue(e *keyEntry, w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		e.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		e.tail = w.prev
	}
	w.next, w.prev = nil, nil
	if w.state == waitWoken {
		e.wakePending = false
	}
}

// abandon removes a waiter that gives up (timeout, ctx, Close) and passes the key on if it was
// the one woken for it.
func (sh *shard) abandon(w *waiter, outcome waitState) {
	e := w.h.e
	sh.dequeue(e, w)
	w.h.e = nil
	sh.unschedule(w.h)
	w.finish(outcome)
	sh.passOn(e)
}

// waitState is where a waiter stands; it changes only under the shard mutex.
type waitState uint8

const (
	waitQueued    waitState = iota // in the queue, asleep
	waitWoken                      // the key was freed and this waiter was woken to take it
	waitGranted                    // the key was handed to this waiter directly
	waitTimedOut                   // Options.Timeout passed
	waitClosed                     // its Locker was closed
	waitCancelled                  // its ctx was done
)

// waiter is a Lock call queued for a busy key. It exists only while the call waits.
type waiter struct {
	h          *Handle // the handle it becomes when granted
	next, prev *waiter
	since      time.Duration // Mono of h's clock when it queued
	lease      time.Duration // the lease h gets when granted
	wake       chan struct{} // one buffered slot: a wake-up is never lost and never blocks
	state      waitState
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *waiter) finish(s waitState) {
	w.state = s
	w.h.w = nil
	w.signal()
}

// scheduler keeps the deadlines (lease ends and wait timeouts) of one shard on one clock in a
// heap, and one timer armed for the earliest. The timer is re-armed only when an earlier deadline
// arrives, so an uncontended Lock and Release touch no runtime timer.
type scheduler struct {
	// What every Lock and Release touches comes first, in one cache line.
	heap    deadlineHeap
	timer   Timer
	armedAt time.Duration
	own     [2]*Handle // the heap's first storage, in the shard's own cache lines

	sh    *shard
	clock Clock
	gen   uint64 // identifies the current timer; a stale callback sees a newer one and returns
}

// push schedules h at its deadline field (its lease end, or its wait's timeout while it waits);
// now is the current Mono of the scheduler's clock.
func (s *scheduler) push(h *Handle, now time.Duration) {
	if s.heap == nil {
		s.heap = s.own[:0]
	}
	s.heap.push(h)
	s.armFor(h.dueAt(), now)
}

// remove unschedules h; it is a no-op for a handle that is not scheduled here.
func (s *scheduler) remove(h *Handle) {
	i := int(h.heapIdx)
	if i < 0 || i >= len(s.heap) || s.heap[i] != h {
		return
	}
	s.heap.removeAt(i)
	if len(s.heap) == 0 && cap(s.heap) > shrinkAfter {
		s.heap = nil
	}
}

func (s *scheduler) armFor(at, now time.Duration) {
	if s.timer != nil && s.armedAt <= at {
		return
	}
	s.disarm()
	s.gen++
	gen := s.gen
	s.armedAt = at
	s.timer = s.clock.AfterFunc(at-now, func() { s.fire(gen) })
}

func (s *scheduler) disarm() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// fire expires every lease and times out every wait that has fallen due, then re-arms.
func (s *scheduler) fire(gen uint64) {
	sh := s.sh
	sh.mu.Lock()
	if gen != s.gen || s.timer == nil {
		sh.mu.Unlock()
		return
	}
	s.timer = nil
	now := s.clock.Mono()
	for len(s.heap) > 0 && s.heap[0].dueAt() <= now {
		h := s.heap[0]
		if w := h.w; w != nil {
			sh.abandon(w, waitTimedOut)
		} else {
			sh.expire(h)
		}
		s.remove(h) // a no-op unless the branch above left it scheduled
	}
	if len(s.heap) > 0 {
		s.armFor(s.heap[0].dueAt(), now)
	}
	sh.unlockAndRunHooks()
}

// deadlineHeap is a binary min-heap of handles by dueAt, each knowing its index. It is written
// out rather than built on container/heap: an uncontended Lock and Release each touch it once,
// and the interface calls and boxing of container/heap cost as much as the work itself.
type deadlineHeap []*Handle

func (d *deadlineHeap) push(h *Handle) {
	*d = append(*d, h)
	d.up(len(*d)-1, h)
}

// removeAt takes out the handle at index i.
func (d *deadlineHeap) removeAt(i int) {
	old := *d
	n := len(old) - 1
	h := old[i]
	last := old[n]
	old[n] = nil
	*d = old[:n]
	h.heapIdx = -1
	if i == n {
		return
	}
	if !d.down(i, last) {
		d.up(i, last)
	}
}

// up places h, due to go at index i or above it, moving its ancestors down.
func (d deadlineHeap) up(i int, h *Handle) {
	at := h.dueAt()
	for i > 0 {
		p := (i - 1) / 2
		parent := d[p]
		if parent.dueAt() <= at {
			break
		}
		d[i] = parent
		parent.heapIdx = int32(i)
		i = p
	}
	d[i] = h
	h.heapIdx = int32(i)
}

// down places h, due to go at index i or below it, moving its descendants up. It reports whether
// h moved.
func (d deadlineHeap) down(i int, h *Handle) bool {
	at := h.dueAt()
	start := i
	for {
		c := 2*i + 1
		if c >= len(d) {
			break
		}
		if r := c + 1; r < len(d) && d[r].dueAt() < d[c].dueAt() {
			c = r
		}
		child := d[c]
		if at <= child.dueAt() {
			break
		}
		d[i] = child
		child.heapIdx = int32(i)
		i = c
	}
	d[i] = h
	h.heapIdx = int32(i)
	return i > start
}
