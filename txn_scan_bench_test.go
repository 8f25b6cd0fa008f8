package recordlock_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock"
)

// scanBenchKeys is how many consecutive records the scan benchmarks read.
const scanBenchKeys = 1000

// scanBenchDB returns a database holding scanBenchKeys records with 8-byte values under the
// prefix "scan/", and that prefix's Range.
func scanBenchDB(b *testing.B) (*grocksdb.DB, [][]byte, recordlock.Range) {
	b.Helper()
	db := openDB(b)
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	keys := benchKeys("scan", scanBenchKeys)
	for _, k := range keys {
		if err := db.Put(wo, k, make([]byte, 8)); err != nil {
			b.Fatal(err)
		}
	}
	return db, keys, recordlock.Prefix([]byte("scan/"))
}

// scanBenchWrites are the few writes a scanning Txn has staged: two overwrites, a delete and an
// insert among the records.
func scanBenchWrites(keys [][]byte) (puts, deletes [][]byte) {
	return [][]byte{keys[10], keys[500], append(bytes.Clone(keys[700]), 'x')}, [][]byte{keys[300]}
}

// BenchmarkTxnScan is a Txn reading 1,000 consecutive records with four writes staged among them:
// by Txn.Scan (recordlock); by RocksDB's WriteBatchWithIndex holding the same writes, iterated
// over the database (writebatchwi), the read-your-writes machinery Scan could have been built
// on; and by a plain RocksDB iterator that sees no staged writes (iterator), the floor.
func BenchmarkTxnScan(b *testing.B) {
	b.Run("recordlock", func(b *testing.B) {
		db, keys, r := scanBenchDB(b)
		l := newLocker(b, db)
		txn := l.Begin()
		defer txn.Rollback()
		puts, deletes := scanBenchWrites(keys)
		for _, k := range append(puts, deletes...) {
			if _, err := txn.Lock(context.Background(), k, benchOpts); err != nil {
				b.Fatal(err)
			}
		}
		for _, k := range puts {
			if err := txn.Put(k, []byte("staged")); err != nil {
				b.Fatal(err)
			}
		}
		for _, k := range deletes {
			if err := txn.Delete(k); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		for b.Loop() {
			n := 0
			if err := txn.Scan(r, func(key, value []byte) error { n += len(value); return nil }); err != nil {
				b.Fatal(err)
			}
			if n != 8*(scanBenchKeys-3)+6*3 {
				b.Fatalf("scanned %d value bytes", n)
			}
		}
	})
	b.Run("writebatchwi", func(b *testing.B) {
		db, keys, r := scanBenchDB(b)
		wb := grocksdb.NewWriteBatchWI(0, true)
		defer wb.Destroy()
		puts, deletes := scanBenchWrites(keys)
		for _, k := range puts {
			wb.Put(k, []byte("staged"))
		}
		for _, k := range deletes {
			wb.Delete(k)
		}
		b.ReportAllocs()
		for b.Loop() {
			ro := grocksdb.NewDefaultReadOptions()
			ro.SetIterateUpperBound(r.End)
			it := wb.NewIteratorWithBase(db, db.NewIterator(ro))
			n := 0
			for it.Seek(r.Start); it.Valid(); it.Next() {
				if !bytes.HasPrefix(it.Key().Data(), r.Start) {
					break // the staged writes are not bounded by the base iterator's ReadOptions
				}
				n += len(it.Value().Data())
			}
			if err := it.Err(); err != nil {
				b.Fatal(err)
			}
			it.Close()
			ro.Destroy()
			if n != 8*(scanBenchKeys-3)+6*3 {
				b.Fatalf("scanned %d value bytes", n)
			}
		}
	})
	b.Run("iterator", func(b *testing.B) {
		db, _, r := scanBenchDB(b)
		b.ReportAllocs()
		for b.Loop() {
			ro := grocksdb.NewDefaultReadOptions()
			ro.SetIterateUpperBound(r.End)
			it := db.NewIterator(ro)
			n := 0
			for it.Seek(r.Start); it.Valid(); it.Next() {
				n += len(it.Value().Data())
			}
			if err := it.Err(); err != nil {
				b.Fatal(err)
			}
			it.Close()
			ro.Destroy()
			if n != 8*scanBenchKeys {
				b.Fatalf("scanned %d value bytes", n)
			}
		}
	})
}

// stagedTxn keeps BenchmarkStageWrite's Txns on the heap in both forms, as a Txn that locks is.
var stagedTxn *recordlock.Txn

// BenchmarkStageWrite is a Txn that stages one write, without the lock and the RocksDB write: in
// recordlock's Txn as it is (Begin, Put, Rollback; a Commit of one write then calls RocksDB's Put
// with no batch), and in a Txn that would keep its writes in a WriteBatchWithIndex (Begin and
// Rollback, and the batch's make, Put and free; a Commit would then write that batch). The
// difference is about what P4 would pay per Txn had Scan been built on WriteBatchWithIndex.
func BenchmarkStageWrite(b *testing.B) {
	defer func() { stagedTxn = nil }()
	key, value := []byte("bench/counter/12345"), make([]byte, 8)
	b.Run("recordlock", func(b *testing.B) {
		l := newLocker(b, openDB(b))
		b.ReportAllocs()
		for b.Loop() {
			txn, err := l.BeginTx(recordlock.TxnOptions{AllowUnlockedWrites: true})
			if err != nil {
				b.Fatal(err)
			}
			if err := txn.Put(key, value); err != nil {
				b.Fatal(err)
			}
			txn.Rollback()
			stagedTxn = txn
		}
	})
	b.Run("writebatchwi", func(b *testing.B) {
		l := newLocker(b, openDB(b))
		b.ReportAllocs()
		for b.Loop() {
			txn, err := l.BeginTx(recordlock.TxnOptions{AllowUnlockedWrites: true})
			if err != nil {
				b.Fatal(err)
			}
			wb := grocksdb.NewWriteBatchWI(0, true)
			wb.Put(key, value)
			if wb.Count() != 1 {
				b.Fatal("the write was not staged")
			}
			wb.Destroy()
			txn.Rollback()
			stagedTxn = txn
		}
	})
}
