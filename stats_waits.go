package recordlock

import (
	"bytes"
	"iter"
	"time"
)

// WaitInfo describes one request queued for a busy key, as Locker.Waits reports it. Joined with
// Locker.Locks on (ColumnFamilyID, Key) it gives the wait-for graph: the waiting owner waits for
// the owners of the key's holders.
type WaitInfo struct {
	Key            []byte        // a copy
	ColumnFamilyID uint32        // the record's column family; 0 is the default one
	Owner          string        // the Name of the Txn that waits, else ""
	Shared         bool          // the request is for a shared lock
	Upgrade        bool          // the request upgrades a shared lock its Txn holds to exclusive
	Waited         time.Duration // time queued so far, on the waiting Locker's clock
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
		for i := range l.tab.shards {
			batch, _ = l.tab.shards[i].appendWaits(batch[:0], nil, false)
			for _, info := range batch {
				if !yield(info) {
					return
				}
			}
		}
	}
}

// appendWaits appends a WaitInfo for every request queued in the shard, oldest first per key,
// and, with withHolders, a LockInfo for each holder of each key with a request queued, read in the
// same visit so that a wait and what it waits for agree. It settles nothing: the holder of a key
// with a request queued has its deadline on a timer, which settles it.
func (sh *shard) appendWaits(waits []WaitInfo, holders []LockInfo, withHolders bool) ([]WaitInfo, []LockInfo) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.index.all(func(e *keyEntry) {
		if e.head == nil {
			return
		}
		waiters := 0
		for w := e.head; w != nil; w = w.next {
			waiters++
			h := w.h
			info := WaitInfo{
				Key:            bytes.Clone(h.key()),
				ColumnFamilyID: h.cf,
				Waited:         max(0, h.l.clock.Mono()-w.since),
			}
			info.Shared, info.Upgrade = w.mode()
			if h.owner != nil {
				info.Owner = h.owner.Name()
			}
			waits = append(waits, info)
		}
		sh.counts.visited += uint64(waiters)
		if withHolders && e.holder != nil {
			holders = append(holders, e.holder.lockInfo(waiters))
			for _, s := range e.sharers {
				holders = append(holders, s.lockInfo(waiters))
			}
			sh.counts.visited += uint64(1 + len(e.sharers))
		}
	})
	return waits, holders
}
