package recordlock

import (
	"bytes"
	"iter"
	"time"

	"github.com/recordlock/recordlock/internal/debugview"
	"github.com/recordlock/recordlock/internal/locktable"
)

// WaitInfo describes one request queued for a busy key or range, as Locker.Waits reports it.
// Joined with Locker.Locks on (ColumnFamilyID, Key) it gives the wait-for graph of key locks: the
// waiting owner waits for the owners of the key's holders. A request involving a range waits for
// the holders whose keys or ranges share a key with it.
type WaitInfo struct {
	Key            []byte        // a copy; a range request's Start
	ColumnFamilyID uint32        // the record's column family; 0 is the default one
	Owner          string        // the Name of the Txn that waits, else ""
	Shared         bool          // the request is for a shared lock
	Upgrade        bool          // the request upgrades a shared lock its Txn holds to exclusive
	Waited         time.Duration // time queued so far, on the waiting Locker's clock
	IsRange        bool          // a range request (LockRange): Key is its Start
	RangeEnd       []byte        // a copy of a range request's End; nil with no upper bound, and for a key
}

// Waits returns every request queued now in the Locker's database, of every Locker of it. It
// visits the table shard by shard, holding each shard's mutex only to copy that shard's queues,
// so each WaitInfo is consistent and no request appears twice, while requests elsewhere may
// come and go as the sequence runs. A Txn's request is listed from the moment it queues, which
// can be an instant before Stats.Waiting counts it (its deadlock check is still running).
// Breaking out of the loop stops the visit.
func (l *Locker) Waits() iter.Seq[WaitInfo] {
	return func(yield func(WaitInfo) bool) {
		var batch []WaitInfo
		for i := range locktable.ShardCount {
			batch = batch[:0]
			l.tab.VisitWaits(i, func(q locktable.QueuedRequest) { batch = append(batch, waitInfo(q)) }, nil)
			for _, info := range batch {
				if !yield(info) {
					return
				}
			}
		}
	}
}

// waitInfo describes the queued request q.
func waitInfo(q locktable.QueuedRequest) WaitInfo {
	r := &q.Request
	info := WaitInfo{
		Key:            bytes.Clone(r.Key),
		ColumnFamilyID: r.CF,
		Shared:         q.Shared,
		Upgrade:        q.Upgrade,
		Waited:         q.Waited,
	}
	if r.Range() {
		info.IsRange, info.RangeEnd = true, bytes.Clone(r.End)
	}
	if r.Owner != nil {
		info.Owner = r.Owner.Name()
	}
	return info
}

// WaitsAndHolders is for package httpdebug of this module, which alone can make a debugview.Pass:
// every request queued now in l's database and a LockInfo for the holder of each key with a
// request queued, visiting each shard once. Like Locks, it reads each shard under its mutex only
// to copy these rows.
func (l *Locker) WaitsAndHolders(debugview.Pass) ([]WaitInfo, []LockInfo) {
	var waits []WaitInfo
	var holders []LockInfo
	for i := range locktable.ShardCount {
		l.tab.VisitWaits(i, func(q locktable.QueuedRequest) { waits = append(waits, waitInfo(q)) },
			func(s locktable.Snapshot, waiters int) { holders = append(holders, lockInfo(s, waiters)) })
	}
	for i := range holders { // outside the shards' mutexes
		holders[i].ColumnFamily = l.state.families.name(holders[i].ColumnFamilyID)
	}
	return waits, holders
}
