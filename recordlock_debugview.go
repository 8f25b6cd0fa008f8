package recordlock

import (
	"github.com/recordlock/recordlock/internal/debugview"
	"github.com/recordlock/recordlock/internal/locktable"
)

func init() {
	debugview.Lend(debugview.Source[*Locker, WaitInfo, LockInfo]((*Locker).waitsAndHolders))
}

// waitsAndHolders returns every request queued now in l's database and a LockInfo for the
// holder of each key with a request queued, visiting each shard once, for package httpdebug.
// Like Locks, it reads each shard under its mutex only to copy these rows.
func (l *Locker) waitsAndHolders() ([]WaitInfo, []LockInfo) {
	var waits []WaitInfo
	var holders []LockInfo
	for i := range locktable.ShardCount {
		l.tab.VisitWaits(i, func(q locktable.QueuedRequest) { waits = append(waits, waitInfo(q)) },
			func(s locktable.Snapshot, waiters int) { holders = append(holders, lockInfo(s, waiters)) })
	}
	return waits, holders
}
