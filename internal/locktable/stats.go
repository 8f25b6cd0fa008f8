package locktable

import (
	"time"

	"github.com/recordlock/recordlock/internal/invariants"
)

// Counts are the table's figures, summed over its shards: Held and Waiting are readings of now,
// the rest count from when the table was made.
type Counts struct {
	Held, Waiting                                                       int
	Acquired, Contended, Timeouts, Canceled, Deadlocks, Lapsed, Revoked uint64
	Fenced, HookFailures                                                uint64
	WaitTime                                                            time.Duration
}

// shardCounts are the counters of one shard that the uncontended path does not touch; they are
// written under the shard mutex and summed by Counts.
type shardCounts struct {
	// visited counts the holders and queued requests VisitHolders and VisitWaits have read; tests
	// bound their cost per key with it.
	visited invariants.Counter
	// repassed counts the key requests repass moved, and repassTried the requests it asked
	// whether they could move (passPointOf); tests bound its cost with them.
	repassed, repassTried invariants.Counter
	// checks counts the releases of the mutex the checker of a build with the tag has seen
	// (shard_check.go).
	checks invariants.Counter
	// sharersRead counts the sharers read to settle every lapsed one, by an exclusive request that
	// queues or an upgrade (settleOtherSharers); tests bound its cost with it.
	sharersRead invariants.Counter

	waiting                                                           int
	contended, timeouts, canceled, deadlocks, lapsed, revoked, fenced uint64
	waitTime                                                          time.Duration
}

// Counts sums the table's figures. Each shard is read under its mutex, which it holds only to
// copy a few words.
func (t *Table) Counts() Counts {
	var s Counts
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		s.Held += sh.held
		s.Acquired += sh.acquired
		c := &sh.counts
		s.Waiting += c.waiting
		s.Contended += c.contended
		s.WaitTime += c.waitTime
		s.Timeouts += c.timeouts
		s.Canceled += c.canceled
		s.Deadlocks += c.deadlocks
		s.Lapsed += c.lapsed
		s.Revoked += c.revoked
		s.Fenced += c.fenced
		sh.mu.Unlock()
	}
	s.HookFailures = t.hookFailures.Load()
	return s
}

// VisitHolders calls f, under the mutex of shard i (0 <= i < ShardCount), on every holder of a
// key or range in that shard, with the number of requests queued that conflict with it. A holder
// whose lease lapsed unwatched is settled first, as any look at its key settles it, and not
// visited. f must not call into the table. A key with s holders and q
// requests queued costs O(s + q): its queue is counted once, not once per holder. In a home
// shard, the requests queued in a range space are read once per call into an index
// (queuedindex.go), from which each holder of a range or key there gets its count in O(log q):
// O((s + q) log q) for s holders and q requests, whatever their spans. The mutex is taken once to
// list the shard's keys and ranges (a pointer each), then once per key or span (and once to make
// each space's index), so no request waits behind more than one such visit. A shard of no range
// space and at most visitTogether keys is visited in the hold that would list it: a request
// waits behind those few keys' visits, and a caller that visits every shard while other
// goroutines lock and release keys queues for a busy shard's mutex once, not once per key. The
// counts of a call are of the queue as its index read it.
func (t *Table) VisitHolders(i int, f func(s Snapshot, waiters int)) {
	sh := &t.shards[i]
	sh.mu.Lock()
	if len(sh.spaces) == 0 && sh.index.n <= visitTogether {
		sh.visitFewHoldersLocked(f)
		sh.unlockAndRunDeferred()
		return
	}
	keys, ranges := sh.listKeysLocked(func(e *keyEntry) bool { return e.holder != nil })
	sh.mu.Unlock()
	var xs spaceIndexes
	for i := 0; i < len(ranges); {
		sh.mu.Lock()
		i += sh.visitRanges(ranges[i:], &xs, f)
		sh.unlockAndRunDeferred()
	}
	var holders []*Claim
	for _, k := range keys {
		sh.mu.Lock()
		if e := k.find(sh); e != nil && e.holder != nil {
			holders = sh.visitHolders(e, holders[:0], &xs, f)
		}
		sh.unlockAndRunDeferred()
	}
}

// visitTogether bounds the keys of a shard VisitHolders visits under one hold of its mutex.
const visitTogether = 16

// visitFewHoldersLocked is VisitHolders of a shard of no range space and at most visitTogether
// keys, with its mutex held.
func (sh *shard) visitFewHoldersLocked(f func(s Snapshot, waiters int)) {
	// Listed first: settling a lapsed holder can take its entry out of the index.
	var few [visitTogether]*keyEntry
	n := 0
	sh.index.all(func(e *keyEntry) {
		if e.holder != nil {
			few[n] = e
			n++
		}
	})
	var xs spaceIndexes
	var holders []*Claim
	for _, e := range few[:n] {
		if e.holder != nil {
			holders = sh.visitHolders(e, holders[:0], &xs, f)
		}
	}
}

// visitHolders is VisitHolders of e's key, with the mutex held; out is scratch space.
func (sh *shard) visitHolders(e *keyEntry, out []*Claim, xs *spaceIndexes, f func(s Snapshot, waiters int)) []*Claim {
	out = e.appendHolders(out)
	live := out[:0] // filtered in place
	for _, h := range out {
		if h.flags()&flagFencing == 0 && h.settle(sh) {
			continue
		}
		live = append(live, h)
	}
	if len(live) == 0 {
		return out
	}
	waiters := e.queued()
	sh.counts.visited.Add(uint64(len(out) + waiters))
	x, c := sh.queuedRangesOver(live[0], xs) // range requests queued over the key wait too
	for _, h := range live {
		n := waiters
		if x != nil {
			n += x.conflictingOf(&c, h)
		}
		f(h.snapshot(), n)
	}
	return out
}

// keyRef names a key of a shard across a release of its mutex, in which its entry may leave the
// table and be reused: by the entry's hash and a claim of the key (a holder or a queued request),
// whose record never changes.
type keyRef struct {
	hash uint64
	h    *Claim
}

// find returns the entry of the key, if it is still in the shard, with the mutex held.
func (k keyRef) find(sh *shard) *keyEntry { return sh.index.find(k.hash, k.h.cf, k.h.key()) }

// listKeys takes sh's mutex and lists the keys whose entries want accepts and the range claims
// and requests of the shard's spaces.
func (sh *shard) listKeys(want func(*keyEntry) bool) (keys []keyRef, ranges []*Claim) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.listKeysLocked(want)
}

// listKeysLocked is listKeys with sh's mutex held.
func (sh *shard) listKeysLocked(want func(*keyEntry) bool) (keys []keyRef, ranges []*Claim) {
	sh.index.all(func(e *keyEntry) {
		if !want(e) {
			return
		}
		h := e.holder
		if h == nil {
			h = e.head.h
		}
		keys = append(keys, keyRef{hash: e.hash, h: h})
	})
	for _, sp := range sh.spaces {
		ranges = sp.appendRanges(ranges)
	}
	return keys, ranges
}

// QueuedRequest is one request queued for a busy key, as VisitWaits shows it.
type QueuedRequest struct {
	Request Snapshot      // the request's claim: for an upgrade, a stand-in's, with its key and owner
	Waited  time.Duration // time queued so far, on its tenant's clock
	Shared  bool          // a shared request
	Upgrade bool          // the upgrade of a shared claim to exclusive
}

// request is w as VisitWaits shows it, read now.
func (w *waiter) request() QueuedRequest {
	shared, upgrade := w.mode()
	return QueuedRequest{Request: w.h.snapshot(), Waited: max(0, w.h.ten.clock.Mono()-w.since), Shared: shared, Upgrade: upgrade}
}

// VisitWaits calls wait, under the mutex of shard i, on every request queued in that shard, oldest
// first per key, and, unless holder is nil, holder on each holder of each key with a request
// queued, with their number, read in the same visit so that a wait and what it waits for agree. It
// settles nothing: the holder of a key with a request queued has its deadline on a timer, which
// settles it. As VisitHolders, it holds the mutex for one key's or one span's visit at a time.
func (t *Table) VisitWaits(i int, wait func(QueuedRequest), holder func(s Snapshot, waiters int)) {
	sh := &t.shards[i]
	keys, ranges := sh.listKeys(func(e *keyEntry) bool { return e.head != nil })
	var xs spaceIndexes
	for i := 0; i < len(ranges); {
		sh.mu.Lock()
		i += sh.visitRangeWaits(ranges[i:], &xs, wait, holder)
		sh.mu.Unlock()
	}
	for _, k := range keys {
		sh.mu.Lock()
		if e := k.find(sh); e != nil && e.head != nil {
			sh.visitWaits(e, wait, holder)
		}
		sh.mu.Unlock()
	}
}

// visitWaits is VisitWaits of e's key, with the mutex held.
func (sh *shard) visitWaits(e *keyEntry, wait func(QueuedRequest), holder func(s Snapshot, waiters int)) {
	waiters := 0
	for w := e.head; w != nil; w = w.next {
		waiters++
		wait(w.request())
	}
	sh.counts.visited.Add(uint64(waiters))
	if holder != nil && e.holder != nil {
		holder(e.holder.snapshot(), waiters)
		for _, s := range e.others() {
			holder(s.snapshot(), waiters)
		}
		sh.counts.visited.Add(uint64(1 + len(e.others())))
	}
}
