package locktable

import "time"

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
	waiting                                                           int
	contended, timeouts, canceled, deadlocks, lapsed, revoked, fenced uint64
	waitTime                                                          time.Duration
	// visited counts the holders and queued requests VisitHolders and VisitWaits have read; tests
	// bound their cost per key with it.
	visited uint64
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
// key in that shard, with the number of requests queued for its key. A holder whose lease lapsed
// unwatched is settled first, as any look at its key settles it, and not visited. f may read the
// hold but must not call into the table. A key with s holders and q requests queued costs
// O(s + q): its queue is counted once, not once per holder.
func (t *Table) VisitHolders(i int, f func(h *Hold, waiters int)) {
	sh := &t.shards[i]
	sh.mu.Lock()
	defer sh.unlockAndRunDeferred()
	if sh.held == 0 {
		return
	}
	sh.visitRanges(f)
	var entries []*keyEntry // collected first: settling can take an entry out of the index
	sh.index.all(func(e *keyEntry) {
		if e.holder != nil {
			entries = append(entries, e)
		}
	})
	var holders []*Hold
	for _, e := range entries {
		holders = e.appendHolders(holders[:0])
		live := holders[:0]
		for _, h := range holders {
			if h.flags()&FlagFencing == 0 && h.settle(sh) {
				continue
			}
			live = append(live, h)
		}
		if len(live) == 0 {
			continue
		}
		waiters := e.queued()
		sh.counts.visited += uint64(len(holders) + waiters)
		for _, h := range live {
			f(h, waiters)
		}
	}
}

// QueuedRequest is one request queued for a busy key, as VisitWaits shows it.
type QueuedRequest struct {
	Hold    *Hold         // the request's hold: for an upgrade, a stand-in with its key and owner
	Waited  time.Duration // time queued so far, on its tenant's clock
	Shared  bool          // a shared request
	Upgrade bool          // the upgrade of a shared hold to exclusive
}

// VisitWaits calls wait, under the mutex of shard i, on every request queued in that shard, oldest
// first per key, and, unless holder is nil, holder on each holder of each key with a request
// queued, with their number, read in the same visit so that a wait and what it waits for agree. It
// settles nothing: the holder of a key with a request queued has its deadline on a timer, which
// settles it.
func (t *Table) VisitWaits(i int, wait func(QueuedRequest), holder func(h *Hold, waiters int)) {
	sh := &t.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.visitRangeWaits(wait, holder)
	sh.index.all(func(e *keyEntry) {
		if e.head == nil {
			return
		}
		waiters := 0
		for w := e.head; w != nil; w = w.next {
			waiters++
			h := w.h
			shared, upgrade := w.mode()
			wait(QueuedRequest{Hold: h, Waited: max(0, h.ten.clock.Mono()-w.since), Shared: shared, Upgrade: upgrade})
		}
		sh.counts.visited += uint64(waiters)
		if holder != nil && e.holder != nil {
			holder(e.holder, waiters)
			for _, s := range e.sharers {
				holder(s, waiters)
			}
			sh.counts.visited += uint64(1 + len(e.sharers))
		}
	})
}
