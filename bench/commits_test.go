package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
)

// BenchmarkConcurrentCommits is the write path under concurrency, without a hot record: 8, 64 or
// 512 goroutines each commit a write of one 8-byte value to a record of its own (the records in
// turn, so no two writes of a run that overlap in time share one), and nothing else. One op is
// one committed write, so ns/op is the time per commit. The contenders:
//
//   - recordlock: a Txn that locks the record exclusively, stages the write and commits; Txns
//     that commit at the same time share one RocksDB write (docs/DESIGN.md §5.4);
//   - rocksdb: a RocksDB pessimistic transaction whose Put locks the record, then Commit, which
//     RocksDB groups with the other writers of the moment;
//   - plain: a plain RocksDB Put, locking nothing: RocksDB's write path alone.
//
// It shows what a commit costs as the number of committers grows: the commit queue's wait is
// bounded by the writes ahead of a Txn, and a group write's cost by the Txns it carries.
func BenchmarkConcurrentCommits(b *testing.B) {
	for _, n := range hotRecordQueues {
		b.Run(fmt.Sprintf("goroutines=%d", n), func(b *testing.B) {
			b.Run("recordlock", func(b *testing.B) {
				l := lockerOn(b, freshDB(b))
				ctx := context.Background()
				var next atomic.Int64
				runOps(b, n, "commits/s", func(int) error {
					i := next.Add(1)
					k := key(int(i))
					txn := l.Begin()
					defer txn.Rollback()
					if _, err := txn.Lock(ctx, k, lockOpts); err != nil {
						return err
					}
					var v [8]byte
					if err := txn.Put(k, binary.BigEndian.AppendUint64(v[:0], uint64(i))); err != nil {
						return err
					}
					return txn.Commit()
				})
			})
			b.Run("rocksdb", func(b *testing.B) {
				tdb := freshTxnDB(b)
				txns := newTxnSlots(n)
				defer txns.destroy()
				var next atomic.Int64
				runOps(b, n, "commits/s", func(w int) error {
					i := next.Add(1)
					txns[w] = tdb.TransactionBegin(fx.wo, fx.to, txns[w])
					var v [8]byte
					if err := txns[w].Put(key(int(i)), binary.BigEndian.AppendUint64(v[:0], uint64(i))); err != nil {
						_ = txns[w].Rollback()
						return err
					}
					return txns[w].Commit()
				})
			})
			b.Run("plain", func(b *testing.B) {
				db := freshDB(b)
				var next atomic.Int64
				runOps(b, n, "commits/s", func(int) error {
					i := next.Add(1)
					var v [8]byte
					return db.Put(fx.wo, key(int(i)), binary.BigEndian.AppendUint64(v[:0], uint64(i)))
				})
			})
		})
	}
}
