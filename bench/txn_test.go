package bench

import (
	"context"
	"testing"

	"github.com/linxGnu/grocksdb"
)

// BenchmarkTxnReadModifyWrite (P4) is a read-modify-write of one record (read an 8-byte counter,
// write it back plus one), rotating over 65,536 records, on the same RocksDB settings for every
// contender. Target: recordlock ≤ 1.10× plain, ≤ 0.9× rocksdb.
//
// Every run (each b.N, of each contender) gets its own copy of one seed database, opened before
// the timer starts: the records in one compacted table file, an empty memtable, a cold block
// cache, so no contender inherits the memtable, table files or pending compactions of whoever ran
// before it. A run writes far less than a memtable holds, so no flush or compaction happens while
// it is timed.
func BenchmarkTxnReadModifyWrite(b *testing.B) {
	// recordlock is a Txn: Lock, Get, Put, and Commit, which writes the batch inside the handle's
	// fence and releases the lock.
	b.Run("recordlock", func(b *testing.B) {
		l := lockerOn(b, freshDB(b))
		ctx := context.Background()
		var buf [8]byte
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			k := key(i)
			txn := l.Begin()
			if _, err := txn.Lock(ctx, k, lockOpts); err != nil {
				b.Fatal(err)
			}
			v, err := txn.Get(k)
			if err != nil {
				b.Fatal(err)
			}
			if err := txn.Put(k, incremented(buf[:0], v)); err != nil {
				b.Fatal(err)
			}
			if err := txn.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	// plain is an unlocked Get and Put on the plain database: no isolation at all.
	b.Run("plain", func(b *testing.B) {
		db := freshDB(b)
		var buf [8]byte
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			k := key(i)
			v, err := db.Get(fx.ro, k)
			if err != nil {
				b.Fatal(err)
			}
			next := increment(buf[:0], v)
			if err := db.Put(fx.wo, k, next); err != nil {
				b.Fatal(err)
			}
		}
	})
	// rocksdb is RocksDB's pessimistic transaction: GetForUpdate locks the key, Commit writes
	// and unlocks it.
	b.Run("rocksdb", func(b *testing.B) {
		tdb := freshTxnDB(b)
		var buf [8]byte
		var txn *grocksdb.Transaction
		defer func() {
			if txn != nil {
				txn.Destroy()
			}
		}()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			k := key(i)
			txn = tdb.TransactionBegin(fx.wo, fx.to, txn)
			v, err := txn.GetForUpdate(fx.ro, k)
			if err != nil {
				b.Fatal(err)
			}
			next := increment(buf[:0], v)
			if err := txn.Put(k, next); err != nil {
				b.Fatal(err)
			}
			if err := txn.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
