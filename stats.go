package recordlock

import (
	"bytes"
	"iter"
	"time"
)

// Stats are figures for one database's key-lock table, shared by every Locker of it. Held and
// Waiting are readings of now; the counters run from when the table was created (when the first
// Locker of the database opened, or reopened after the last one closed).
type Stats struct {
	// Held is the number of holders (handles) of keys now: a key held by three sharers counts
	// three. A lease that ran out while nobody waited for its key, watched its handle's Done or
	// had a release hook on it is still counted until the key or the handle is next used: a Lock
	// of the key, a call on the handle, or Locks.
	Held int
	// Waiting is the number of Lock calls and upgrades queued now for a busy key, each counted
	// once the timers its wait needs (its timeout, the holder's lease end) are armed and, for a
	// Txn, once its wait was checked for a deadlock.
	Waiting int

	Acquired  uint64        // locks granted
	Contended uint64        // of Acquired, the grants that had to wait
	WaitTime  time.Duration // total time the Contended grants waited
	Timeouts  uint64        // Lock calls that waited and then failed with ErrTimeout
	Canceled  uint64        // Lock calls that waited until their ctx was done
	Deadlocks uint64        // lock requests that failed with ErrDeadlock
	// Lapsed counts leases that ran out while their key was still held. Such a lease is counted
	// at its deadline if someone waits for its key, watches Done or has a release hook on it;
	// otherwise when the key or the handle is next used, as for Held.
	Lapsed       uint64
	Revoked      uint64 // leases ended by RevokeLease
	Fenced       uint64 // Fence or Commit calls refused with ErrLeaseExpired: writes kept out
	HookFailures uint64 // release hooks that returned an error or panicked
}

// LockInfo describes one holder of a key, as Locker.Locks reports it.
type LockInfo struct {
	Key            []byte        // a copy
	ColumnFamilyID uint32        // the record's column family; 0 is the default one
	Scope          Scope         // ScopeNode, or ScopeCluster once the handle joined a cluster round
	Owner          string        // the Name of the Txn that holds it, else ""
	Hold           bool          // the lock outlives its Txn (Options.Hold, or UpgradeToHold)
	AcquiredAt     Timestamp     // minted when the key was taken; the round's TsR under a round
	ExpiresAt      time.Time     // when the lease ends by the wall clock, for display (Handle.ExpiresAt)
	Remaining      time.Duration // lease left on the holder's clock; 0 once it has lapsed
	Waiters        int           // Lock calls and upgrades queued for the key
	Token          uint64        // the cluster round's fencing token, 0 when none
	Shared         bool          // a shared lock: the key may have other holders, each listed
}

// shardCounts are the counters of one shard that the uncontended path does not touch; they are
// written under the shard mutex and summed by Stats.
type shardCounts struct {
	waiting                                                           int
	contended, timeouts, canceled, deadlocks, lapsed, revoked, fenced uint64
	waitTime                                                          time.Duration
	// visited counts the holders and queued requests Locks and Waits have read; tests bound
	// their cost per key with it.
	visited uint64
}

// Stats returns the figures of the Locker's database, summed over every shard. Each shard is read
// under its mutex, which it holds only to copy a few words.
func (l *Locker) Stats() Stats {
	var s Stats
	for i := range l.tab.shards {
		sh := &l.tab.shards[i]
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
	s.HookFailures = l.tab.hookFailures.Load()
	return s
}

// Locks returns every holder of a key now in the Locker's database: one LockInfo per handle, so a
// key held by three sharers appears three times. It visits the table shard by shard, holding each
// shard's mutex only to copy that shard's holders, so each LockInfo is consistent and no holder
// appears twice, while locks elsewhere may come and go as the sequence runs. A lease found
// lapsed is settled, as any look at its key settles it, and its key is not reported. Breaking out
// of the loop stops the visit.
func (l *Locker) Locks() iter.Seq[LockInfo] {
	return func(yield func(LockInfo) bool) {
		var batch []LockInfo
		for i := range l.tab.shards {
			batch = l.tab.shards[i].appendLocks(batch[:0])
			for _, info := range batch {
				if !yield(info) {
					return
				}
			}
		}
	}
}

// appendLocks appends a LockInfo for every holder of a key in the shard. A holder whose lease lapsed
// unwatched is settled here, as any look at the key settles it, and not reported.
func (sh *shard) appendLocks(out []LockInfo) []LockInfo {
	sh.mu.Lock()
	defer sh.unlockAndRunHooks()
	if sh.held == 0 {
		return out
	}
	var entries []*keyEntry // collected first: settling can take an entry out of the index
	sh.index.all(func(e *keyEntry) {
		if e.holder != nil {
			entries = append(entries, e)
		}
	})
	var holders []*Handle
	for _, e := range entries {
		holders = e.appendHolders(holders[:0])
		live := holders[:0]
		for _, h := range holders {
			if h.flags()&flagFencing == 0 && h.settle(sh) {
				continue
			}
			live = append(live, h)
		}
		if len(live) == 0 {
			continue
		}
		// The queue is counted once per key, not once per holder: a key with s sharers and q
		// requests queued costs O(s + q).
		waiters := e.queued()
		sh.counts.visited += uint64(len(holders) + waiters)
		for _, h := range live {
			out = append(out, h.lockInfo(waiters))
		}
	}
	return out
}

// lockInfo describes h, the holder of its key, for which waiters requests are queued, with the
// shard mutex held.
func (h *Handle) lockInfo(waiters int) LockInfo {
	info := LockInfo{
		Key:            bytes.Clone(h.key()),
		ColumnFamilyID: h.cf,
		Scope:          h.Scope(),
		Hold:           h.Hold(),
		Shared:         h.Shared(),
		AcquiredAt:     h.acquiredAt,
		ExpiresAt:      time.Unix(0, h.expiresAt),
		Remaining:      max(0, time.Duration(h.deadline.Load())-h.l.clock.Mono()),
	}
	if h.owner != nil {
		info.Owner = h.owner.Name()
	}
	if h.cold != nil {
		info.Token = h.cold.token
	}
	info.Waiters = waiters
	return info
}
