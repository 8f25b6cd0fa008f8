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

// AddFenced counts a fence refused outside the table (a commit that found a lease ended before
// it fenced).
func (h *Hold) AddFenced() { h.shard().counts.fenced++ }

// VisitHolders calls f, under the mutex of shard i (0 <= i < ShardCount), on every holder of a
// key in that shard. A holder whose lease lapsed unwatched is settled first, as any look at its key
// settles it, and not visited. f may read the hold but must not call into the table.
func (t *Table) VisitHolders(i int, f func(*Hold)) {
	sh := &t.shards[i]
	sh.mu.Lock()
	defer sh.unlockAndRunDeferred()
	if sh.held == 0 {
		return
	}
	var holders []*Hold // collected first: settling can take an entry out of the index
	sh.index.all(func(e *keyEntry) { holders = e.appendHolders(holders) })
	for _, h := range holders {
		if h.flags()&FlagFencing == 0 && h.settle(sh) {
			continue
		}
		f(h)
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
// queued, read in the same visit so that a wait and what it waits for agree. It settles nothing:
// the holder of a key with a request queued has its deadline on a timer, which settles it.
func (t *Table) VisitWaits(i int, wait func(QueuedRequest), holder func(*Hold)) {
	sh := &t.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.index.all(func(e *keyEntry) {
		if e.head == nil {
			return
		}
		for w := e.head; w != nil; w = w.next {
			h := w.h
			shared, upgrade := w.mode()
			wait(QueuedRequest{Hold: h, Waited: max(0, h.ten.clock.Mono()-w.since), Shared: shared, Upgrade: upgrade})
		}
		if holder != nil && e.holder != nil {
			holder(e.holder)
			for _, s := range e.sharers {
				holder(s)
			}
		}
	})
}
