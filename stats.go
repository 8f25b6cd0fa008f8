package recordlock

import (
	"bytes"
	"iter"
	"time"

	"github.com/recordlock/recordlock/internal/locktable"
)

// Stats are figures for one database's key-lock table, shared by every Locker of it. Held and
// Waiting are readings of now; the counters run from when the table was created (when the first
// Locker of the database opened, or reopened after the last one closed).
type Stats struct {
	// Held is the number of holders (handles) of keys and ranges now: a key held by three
	// sharers counts three, a range lock once. A lease that ran out while nobody waited for its
	// key, watched its handle's Done or had a release hook on it is still counted until the key
	// or the handle is next used: a Lock of the key, a call on the handle, or Locks.
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

// LockInfo describes one holder of a key or of a range, as Locker.Locks reports it.
type LockInfo struct {
	Key            []byte // a copy; a range lock's Start
	ColumnFamilyID uint32 // the record's column family; 0 is the default one
	// ColumnFamily is its name: a cluster lock's identity across nodes is (ColumnFamily, Key).
	ColumnFamily string
	Scope        Scope         // ScopeNode, or ScopeCluster once the handle joined a cluster round
	Owner        string        // the Name of the Txn that holds it, else ""
	Hold         bool          // the lock outlives its Txn (Options.Hold, or UpgradeToHold)
	AcquiredAt   Timestamp     // minted when the key was taken; the round's TsR under a round
	ExpiresAt    time.Time     // when the lease ends by the wall clock, for display (Handle.ExpiresAt)
	Remaining    time.Duration // lease left on the holder's clock; 0 once it has lapsed
	// Waiters counts the Lock calls and upgrades queued for the key and the range requests queued
	// over it that conflict with the holder; for a range lock, the queued requests that conflict
	// with it (for keys inside it, and ranges that meet it).
	Waiters  int
	Token    uint64 // the cluster round's fencing token, 0 when none
	Shared   bool   // a shared lock: the key may have other holders, each listed
	IsRange  bool   // a range lock (Locker.LockRange): Key is its Start
	RangeEnd []byte // a copy of a range lock's End; nil with no upper bound, and for a key
}

// Stats returns the figures of the Locker's database, summed over every shard of its table. Each
// shard is read under its mutex, which it holds only to copy a few words.
func (l *Locker) Stats() Stats {
	c := l.tab.Counts()
	return Stats{
		Held: c.Held, Waiting: c.Waiting, Acquired: c.Acquired, Contended: c.Contended,
		WaitTime: c.WaitTime, Timeouts: c.Timeouts, Canceled: c.Canceled,
		Deadlocks: c.Deadlocks + l.state.clusterDeadlocks.Load(),
		Lapsed:    c.Lapsed, Revoked: c.Revoked, Fenced: c.Fenced, HookFailures: c.HookFailures,
	}
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
		for i := range locktable.ShardCount {
			batch = batch[:0]
			l.tab.VisitHolders(i, func(s locktable.Snapshot, waiters int) { batch = append(batch, lockInfo(s, waiters)) })
			for _, info := range batch {
				info.ColumnFamily = l.state.families.name(info.ColumnFamilyID) // outside the shard's mutex
				if !yield(info) {
					return
				}
			}
		}
	}
}

// lockInfo describes s, a holder of its key, for which waiters requests are queued.
func lockInfo(s locktable.Snapshot, waiters int) LockInfo {
	info := LockInfo{
		Key:            bytes.Clone(s.Key),
		ColumnFamilyID: s.CF,
		Scope:          ScopeNode,
		Hold:           s.Hold(),
		Shared:         s.Shared(),
		AcquiredAt:     Timestamp(s.AcquiredAt),
		ExpiresAt:      time.Unix(0, s.ExpiresAt),
		Remaining:      s.Remaining,
		Waiters:        waiters,
		Token:          s.Token,
	}
	if s.Range() {
		info.IsRange, info.RangeEnd = true, bytes.Clone(s.End)
	}
	if s.Cluster() {
		info.Scope = ScopeCluster
	}
	if s.Owner != nil {
		info.Owner = s.Owner.Name()
	}
	return info
}
