package recordlock

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock/internal/locktable"
)

// maxGroupBytes bounds the keys and values of one group write, past its leader's own, so that a
// long queue of committers is written in several writes rather than one unbounded batch. It is
// RocksDB's own bound on a write group (max_write_batch_group_size_bytes).
const maxGroupBytes = 1 << 20

// commitQueue decides when a Locker's Txns write their batches to RocksDB (docs/DESIGN.md §5.4).
// A Txn that finds no write of the queue in flight and nobody parked writes at once. One that
// finds a write in flight parks its goroutine, unless another Txn waits for a key it holds, or
// starts to while it is parked (hurry): then it writes at once beside the queue (a bypass), since
// its successors wait for its commit and RocksDB groups concurrent writers itself. When the
// queue's write returns, the first parked Txn leads the next: it writes its batch and the batch
// of every parked Txn it can merge with as one. A batch that cannot be merged (Txn.mergeable)
// never bypasses, is written alone, and with no other write of the Locker in flight. Each Txn
// stays inside its own fences until its batch has landed, so each still lands only while its
// leases are live. Left to RocksDB, every concurrent commit would hold an OS thread in RocksDB's
// write queue, spinning and yielding while the group's leader writes, and would pay for a
// write-ahead-log append of its own.
type commitQueue struct {
	mu        sync.Mutex
	writing   bool            // the queue's write is in flight, or a waiter was told to lead it
	exclusive bool            // that write is an unmergeable batch's, and nothing else may run
	bypasses  int             // writes of waited-on Txns in flight beside the queue
	waiting   []*commitWaiter // the Txns parked, in arrival order; the head leads next
	// parked is len(waiting), stored with every change of it, for hurry to read without mu.
	parked atomic.Int32
}

// commitWaiter is a Txn parked in a commitQueue. Waiters are reused: each is sent to exactly
// once, so once it has received, nothing refers to it but its Txn's goroutine.
type commitWaiter struct {
	t      *Txn
	wake   chan struct{} // receives once: the waiter leads the next write, or its batch was written
	lead   bool          // set before wake when the waiter is to lead
	bypass bool          // set before wake when the waiter is to write beside the queue (hurry)
	merges bool          // t.mergeable(), read once when it queues
	err    error         // the result of the write that carried its batch, set before wake
	// group is the group the waiter leads, kept with the waiter so that its backing array is
	// reused; it is emptied before the lead passes on.
	group []*commitWaiter
}

var commitWaiterPool = sync.Pool{New: func() any { return &commitWaiter{wake: make(chan struct{}, 1)} }}

// write writes t's staged writes: at once when the queue is idle or another Txn waits for a key t
// holds (now, or later while t is parked), else parked until the queue's write returns and then
// in a group write led by the first Txn parked. An error from RocksDB matches ErrCommitAmbiguous.
func (q *commitQueue) write(t *Txn) error {
	merges := t.mergeable()
	q.mu.Lock()
	if q.canStart(merges) {
		q.start(merges)
		q.mu.Unlock()
		defer q.done(writeQueued) // also if the write panics: later commits must not wait for it
		return writeAlone(t)
	}
	w := commitWaiterPool.Get().(*commitWaiter)
	w.t, w.merges = t, merges
	q.waiting = append(q.waiting, w)
	q.parked.Store(int32(len(q.waiting)))
	t.parked = true
	q.mu.Unlock()
	// Parked first, asked second: a request queued for a key of t's before it parked is seen
	// here, and one queued after tells the queue to hurry t. Only this contended path asks.
	if merges && t.waitedOn() {
		q.hurryTxn(t)
	}
	<-w.wake
	switch {
	case w.lead:
		q.lead(w)
	case w.bypass:
		w.err = q.writeBeside(t)
	}
	err := w.err
	*w = commitWaiter{wake: w.wake, group: w.group}
	commitWaiterPool.Put(w)
	return err
}

// writeBeside writes t's batch as a bypass already counted in q.bypasses.
func (q *commitQueue) writeBeside(t *Txn) error {
	defer q.done(writeBypass) // also if the write panics
	return writeAlone(t)
}

// hurry is told, by the key-lock table, the owner of a lock for whose key a request has just
// queued (locktable.Tenant.SetOnWaitedOn). If that owner is a Txn of this queue parked with a
// batch that may bypass, it leaves the queue and writes at once beside it, as it would have had
// the request come before it parked: the waiter waits for its commit and should not also wait
// for the queue. A request queued behind n sharers tells n owners, so a call costs one atomic
// read while nobody is parked; then one for a Txn that is not parked costs one mutex round trip
// and no scan, and one for a parked Txn scans the parked Txns, as many as the goroutines
// committing.
func (q *commitQueue) hurry(o locktable.Owner) {
	// With nobody parked now, the call needs no mutex: a Txn that parks after this read asks
	// whether it is waited on once parked (write), and finds the request that called.
	if t, ok := o.(*Txn); ok && q.parked.Load() != 0 {
		q.hurryTxn(t)
	}
}

// hurryTxn is hurry of t.
func (q *commitQueue) hurryTxn(t *Txn) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !t.parked || !q.canBypass() {
		return
	}
	i := slices.IndexFunc(q.waiting, func(w *commitWaiter) bool { return w.t == t })
	if !q.waiting[i].merges {
		return
	}
	w := q.waiting[i]
	q.waiting = slices.Delete(q.waiting, i, i+1)
	q.parked.Store(int32(len(q.waiting)))
	t.parked = false
	q.bypasses++
	w.bypass = true
	w.wake <- struct{}{}
}

// canStart reports whether the queue's next write may begin now, for a mergeable batch or not:
// nobody parked ahead, no queue write in flight, and for an unmergeable batch no bypass either.
// q.mu is held.
func (q *commitQueue) canStart(merges bool) bool {
	return len(q.waiting) == 0 && q.canLead(merges)
}

// canLead is canStart for the head of the queue. q.mu is held.
func (q *commitQueue) canLead(merges bool) bool {
	return !q.writing && (merges || q.bypasses == 0)
}

// canBypass reports whether a mergeable batch may be written beside the queue: no unmergeable
// batch is being written, nor waits at the head of the queue for the bypasses to end (new ones
// would keep it waiting). q.mu is held.
func (q *commitQueue) canBypass() bool {
	return !q.exclusive && (len(q.waiting) == 0 || q.waiting[0].merges)
}

// start marks the queue's write as begun. q.mu is held.
func (q *commitQueue) start(merges bool) {
	q.writing = true
	q.exclusive = !merges
}

// Which write done ends.
const (
	writeQueued = false
	writeBypass = true
)

// done ends a write, the queue's or a bypass, then tells the first parked Txn, if it may now
// start, to lead the next write.
func (q *commitQueue) done(bypass bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if bypass {
		q.bypasses--
	} else {
		q.writing, q.exclusive = false, false
	}
	if len(q.waiting) == 0 || !q.canLead(q.waiting[0].merges) {
		return
	}
	w := q.waiting[0]
	q.waiting[0] = nil
	q.waiting = q.waiting[1:]
	q.parked.Store(int32(len(q.waiting)))
	w.t.parked = false
	q.start(w.merges)
	w.lead = true
	w.wake <- struct{}{}
}

// lead writes the group w takes from the queue, wakes its other members with the result and
// ends the write. A panic in the write wakes them too, with an ambiguous error, before it goes on
// up w's goroutine.
func (q *commitQueue) lead(w *commitWaiter) {
	group := q.takeGroup(w)
	defer func() {
		if r := recover(); r != nil {
			for _, m := range group {
				m.err = errWritePanicked
			}
			q.wakeAndEnd(group)
			panic(r)
		}
	}()
	writeGroup(group)
	q.wakeAndEnd(group)
}

// wakeAndEnd wakes group's members besides its leader, forgets them, and ends the write.
func (q *commitQueue) wakeAndEnd(group []*commitWaiter) {
	lead := group[0]
	for _, m := range group[1:] {
		m.wake <- struct{}{}
	}
	clear(group) // the group's Txns must not stay reachable
	lead.group = group[:0]
	q.done(writeQueued)
}

// takeGroup returns lead, a waiter told to lead, followed by the parked waiters that can share
// its write, which it removes from the queue. It takes them until the batches taken besides
// lead's reach maxGroupBytes, so the last one taken may cross that bound, as in RocksDB's own
// write groups. A waiter shares lead's write when both batches are mergeable and use the same
// write options. The waiters left keep their order. It scans the queue only until the bound is
// reached, so forming a group costs one step per waiter it takes or passes over.
func (q *commitQueue) takeGroup(lead *commitWaiter) []*commitWaiter {
	group := append(lead.group[:0], lead)
	if !lead.merges {
		return group
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	rest := q.waiting[:0]
	size, i := 0, 0
	for ; i < len(q.waiting) && size < maxGroupBytes; i++ {
		if w := q.waiting[i]; w.merges && w.t.mode == lead.t.mode {
			size += w.t.stagedBytes()
			w.t.parked = false
			group = append(group, w)
		} else {
			rest = append(rest, w)
		}
	}
	rest = append(rest, q.waiting[i:]...)
	clear(q.waiting[len(rest):]) // the taken waiters must not stay reachable
	q.waiting = rest
	q.parked.Store(int32(len(q.waiting)))
	return group
}

// writeGroup writes the staged writes of group, every member with the write options of the
// first, as one RocksDB write, and sets each member's err to its result. Every member's batch is
// mergeable (takeGroup), so no member's batch can make RocksDB fail the others'; a failed write
// (an I/O error, a database stopped by an earlier error) fails every member, ambiguously.
func writeGroup(group []*commitWaiter) {
	lead := group[0].t
	if len(group) == 1 {
		group[0].err = writeAlone(lead)
		return
	}
	if fp := lead.l.failpoints.groupWrite; fp != nil {
		fp(len(group))
	}
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	for _, m := range group {
		m.t.addTo(wb)
	}
	err := ambiguous(lead.l.db.Write(lead.mode.options(), wb))
	for _, m := range group {
		m.err = err
	}
}

// writeAlone writes t's staged writes as a RocksDB write of their own.
func writeAlone(t *Txn) error {
	if fp := t.l.failpoints.groupWrite; fp != nil {
		fp(1)
	}
	return ambiguous(t.write())
}

// waitedOn reports whether a request is queued for a key t holds: some Txn or Lock waits for
// t's commit to end.
func (t *Txn) waitedOn() bool {
	for _, x := range t.locks.items {
		if x.h.waitedOn() {
			return true
		}
	}
	return false
}

// waitedOn reports whether a request is queued for the key h holds or waits for.
func (h *Handle) waitedOn() bool { return h.claim.WaitedOn() }

// mergeable reports whether t's batch may share a RocksDB write with other Txns' batches: when
// it writes only the default column family. RocksDB applies a batch naming a column family it
// does not have (dropped while the Txn was open, or of another database) in part, logs it whole
// and then refuses every write, so it would turn the outcome of every batch merged with it into a
// failure that reopening the database undoes. The default family cannot be dropped; any other
// can be, between any check and the write, so a batch writing one is written alone, and its
// outcome, whatever it is, stays its own.
func (t *Txn) mergeable() bool {
	for _, w := range t.writes.items {
		if w.cfID != 0 {
			return false
		}
	}
	return true
}
