package recordlock

import (
	"sync"

	"github.com/linxGnu/grocksdb"
)

// maxGroupBytes bounds the keys and values of one group write, past its leader's own, so that a
// long queue of committers is written in several writes rather than one unbounded batch. It is
// RocksDB's own bound on a write group (max_write_batch_group_size_bytes).
const maxGroupBytes = 1 << 20

// commitQueue writes the batches of a Locker's Txns that commit at the same time as one RocksDB
// write (docs/DESIGN.md §5.4). One write is in flight at a time; the Txns that reach Commit while
// it is park as goroutines, and when it returns the first of them writes all of them that use
// the same write options in one batch. Each stays inside its own fences until its batch has
// landed, so each still lands only while its leases are live. Left to RocksDB, every concurrent
// commit would hold an OS thread in RocksDB's write queue, spinning and yielding while the
// group's leader writes, and every Txn would pay for a write-ahead-log append of its own.
type commitQueue struct {
	mu      sync.Mutex
	writing bool            // a write is in flight, or a waiter was told to lead the next one
	waiting []*commitWaiter // the Txns queued behind it, in arrival order; the head leads next
	// group is the group being written. One write is in flight at a time, so one slice serves
	// every group; its leader empties it before it hands the lead on.
	group []*commitWaiter
}

// commitWaiter is a Txn queued in a commitQueue. Waiters are reused: each is sent to exactly
// once, so once it has received, nothing refers to it but its Txn's goroutine.
type commitWaiter struct {
	t    *Txn
	wake chan struct{} // receives once: the waiter leads the next write, or its batch was written
	lead bool          // set before wake when the waiter is to lead
	err  error         // the result of the write that carried its batch, set before wake
}

var waiters = sync.Pool{New: func() any { return &commitWaiter{wake: make(chan struct{}, 1)} }}

// write writes t's staged writes: alone when no other write is in flight, else in a group
// write led by the first Txn queued behind that write.
func (q *commitQueue) write(t *Txn) error {
	q.mu.Lock()
	if !q.writing {
		q.writing = true
		q.mu.Unlock()
		err := writeAlone(t)
		q.next()
		return err
	}
	w := waiters.Get().(*commitWaiter)
	w.t = t
	q.waiting = append(q.waiting, w)
	q.mu.Unlock()
	<-w.wake
	if w.lead {
		group := q.takeGroup(w)
		writeGroup(group)
		for _, m := range group[1:] {
			m.wake <- struct{}{}
		}
		clear(group) // the group's Txns must not stay reachable
		q.next()
	}
	err := w.err
	*w = commitWaiter{wake: w.wake}
	waiters.Put(w)
	return err
}

// takeGroup removes lead, the head of the queue, from the queue, and after it every waiter with
// the same write options while the batches taken besides lead's stay under maxGroupBytes, and
// returns them with lead first. The waiters left keep their order. It scans the queue only until
// the bound is reached, so forming a group costs one step per waiter it takes or passes over.
func (q *commitQueue) takeGroup(lead *commitWaiter) []*commitWaiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	group := append(q.group[:0], lead)
	rest := q.waiting[:0]
	size, i := 0, 1
	for ; i < len(q.waiting) && size < maxGroupBytes; i++ {
		if w := q.waiting[i]; w.t.mode == lead.t.mode {
			size += w.t.stagedBytes()
			group = append(group, w)
		} else {
			rest = append(rest, w)
		}
	}
	rest = append(rest, q.waiting[i:]...)
	clear(q.waiting[len(rest):]) // the taken waiters must not stay reachable
	q.waiting = rest
	q.group = group
	return group
}

// next ends the write in flight: the first waiter, if any, leads the next one.
func (q *commitQueue) next() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) == 0 {
		q.writing = false
		return
	}
	w := q.waiting[0]
	w.lead = true
	w.wake <- struct{}{}
}

// writeGroup writes the staged writes of group, every member with the write options of the
// first, as one RocksDB write, and sets each member's err to its result. A failed write fails
// every member: RocksDB's write errors are the database's (an I/O error, or a column family it
// does not have, after which it refuses every write), not one batch's, and a batch it fails may
// have been applied in part, so no member can be told that its write did not land.
func writeGroup(group []*commitWaiter) {
	lead := group[0].t
	if len(group) == 1 {
		group[0].err = writeAlone(lead)
		return
	}
	if hook := lead.l.hooks.groupWrite; hook != nil {
		hook(len(group))
	}
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	for _, m := range group {
		m.t.addTo(wb)
	}
	err := lead.l.db.Write(lead.mode.options(), wb)
	for _, m := range group {
		m.err = err
	}
}

// writeAlone writes t's staged writes as a RocksDB write of their own.
func writeAlone(t *Txn) error {
	if hook := t.l.hooks.groupWrite; hook != nil {
		hook(1)
	}
	return t.write()
}
