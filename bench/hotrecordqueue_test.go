package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/linxGnu/grocksdb"
)

// hotRecordQueues are the numbers of goroutines P10 runs with: how long the queue for the one
// record can grow.
var hotRecordQueues = []int{8, 64, 512}

// hotRecordQueueLockTimeout bounds each RocksDB lock wait of P10, in milliseconds. Its lock waits
// are not first come first served, so with 512 waiters one can wait far longer than the queue's
// length suggests; a timeout would fail the run, so it is as generous as recordlock's default.
const hotRecordQueueLockTimeout = 30_000

// BenchmarkHotRecordQueue (P10) is P8's hot record with the queue for it growing: 8, 64 or 512
// goroutines increment one 8-byte counter, each increment a read-modify-write under the
// contender's lock. One op is one committed increment, so ns/op is the time per commit; the
// metrics are as P8's. After each run the counter must equal the increments done: a lost update
// fails the benchmark. Every run gets a fresh copy of the seed database.
// Target: at 512 goroutines, recordlock ≤ 1.25× locker and ≤ 1.0× rocksdb.
func BenchmarkHotRecordQueue(b *testing.B) {
	hot := key(0)
	for _, n := range hotRecordQueues {
		b.Run(fmt.Sprintf("goroutines=%d", n), func(b *testing.B) {
			// recordlock is a Txn, with deadlock detection: Lock, Get, Put, and Commit, which
			// writes inside the lock's fence and releases the lock.
			b.Run("recordlock", func(b *testing.B) {
				db := freshDB(b)
				l := lockerOn(b, db)
				ctx := context.Background()
				runIncrements(b, n, func(int) error { return txnIncrement(ctx, l, hot) })
				checkCounter(b, func() (*grocksdb.Slice, error) { return db.Get(fx.ro, hot) })
			})
			// locker is Locker.Lock with Get and Put inside the handle's Fence, then Release: the
			// same lock and fence without a Txn, so no wait-for graph.
			b.Run("locker", func(b *testing.B) {
				db := freshDB(b)
				l := lockerOn(b, db)
				ctx := context.Background()
				runIncrements(b, n, func(int) error {
					h, err := l.Lock(ctx, hot, lockOpts)
					if err != nil {
						return err
					}
					defer h.Release()
					return h.Fence(func() error {
						v, err := db.Get(fx.ro, hot)
						if err != nil {
							return err
						}
						var buf [8]byte
						return db.Put(fx.wo, hot, increment(buf[:0], v))
					})
				})
				checkCounter(b, func() (*grocksdb.Slice, error) { return db.Get(fx.ro, hot) })
			})
			// rocksdb is RocksDB's pessimistic transaction with deadlock detection on:
			// GetForUpdate locks the key, Commit writes and unlocks it.
			b.Run("rocksdb", func(b *testing.B) {
				tdb := freshTxnDB(b)
				to := grocksdb.NewDefaultTransactionOptions()
				defer to.Destroy()
				to.SetDeadlockDetect(true)
				to.SetLockTimeout(hotRecordQueueLockTimeout)
				txns := newTxnSlots(n)
				defer txns.destroy()
				runIncrements(b, n, func(w int) error { return txns.increment(tdb, to, w, hot) })
				checkCounter(b, func() (*grocksdb.Slice, error) { return tdb.Get(fx.ro, hot) })
			})
		})
	}
}
