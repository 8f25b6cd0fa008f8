package recordlock_test

import (
	"context"
	"encoding/binary"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock"
)

// txnBenchKeys is how many keys the benchmarks rotate over.
const txnBenchKeys = 1024

// benchDB opens a database whose keys hold 8-byte counters.
func benchDB(b *testing.B) (*grocksdb.DB, [][]byte) {
	b.Helper()
	db := openDB(b)
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	keys := make([][]byte, txnBenchKeys)
	for i := range keys {
		keys[i] = []byte("bench/counter/" + strconv.Itoa(i))
		if err := db.Put(wo, keys[i], make([]byte, 8)); err != nil {
			b.Fatal(err)
		}
	}
	return db, keys
}

// bump returns v, an 8-byte counter, plus one, written into buf.
func bump(buf, v []byte) []byte {
	binary.BigEndian.PutUint64(buf, binary.BigEndian.Uint64(v)+1)
	return buf
}

// txnIncrement is the read-modify-write under test: Lock, Get, Put, Commit.
func txnIncrement(b *testing.B, l *recordlock.Locker, key, buf []byte) {
	txn := l.Begin()
	if _, err := txn.Lock(context.Background(), key, recordlock.Options{}); err != nil {
		b.Fatal(err)
	}
	v, err := txn.Get(key)
	if err != nil {
		b.Fatal(err)
	}
	if err := txn.Put(key, bump(buf, v)); err != nil {
		b.Fatal(err)
	}
	if err := txn.Commit(); err != nil {
		b.Fatal(err)
	}
}

// plainIncrement is the same read-modify-write with no lock: GetBytes then Put.
func plainIncrement(b *testing.B, db *grocksdb.DB, ro *grocksdb.ReadOptions, wo *grocksdb.WriteOptions, key, buf []byte) {
	v, err := db.GetBytes(ro, key)
	if err != nil {
		b.Fatal(err)
	}
	if err := db.Put(wo, key, bump(buf, v)); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkTxnReadModifyWrite measures one fenced increment: serially over rotating keys, in
// parallel on distinct keys per goroutine, and in parallel on four shared keys.
func BenchmarkTxnReadModifyWrite(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		db, keys := benchDB(b)
		l := newLocker(b, db)
		buf := make([]byte, 8)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			txnIncrement(b, l, keys[i%txnBenchKeys], buf)
		}
	})
	b.Run("parallel-distinct", func(b *testing.B) {
		db, keys := benchDB(b)
		l := newLocker(b, db)
		var next atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			base := int(next.Add(1)-1) * 64 // each goroutine rotates over its own 64 keys
			buf := make([]byte, 8)
			for i := 0; pb.Next(); i++ {
				txnIncrement(b, l, keys[(base+i%64)%txnBenchKeys], buf)
			}
		})
	})
	b.Run("parallel-contended", func(b *testing.B) {
		db, keys := benchDB(b)
		l := newLocker(b, db)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]byte, 8)
			for i := 0; pb.Next(); i++ {
				txnIncrement(b, l, keys[i%4], buf)
			}
		})
	})
}

// BenchmarkPlainGetPut is the unlocked baseline of BenchmarkTxnReadModifyWrite on the same
// database settings: a GetBytes and a Put, with no lock and no batch.
func BenchmarkPlainGetPut(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		db, keys := benchDB(b)
		ro := grocksdb.NewDefaultReadOptions()
		defer ro.Destroy()
		wo := grocksdb.NewDefaultWriteOptions()
		defer wo.Destroy()
		buf := make([]byte, 8)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			plainIncrement(b, db, ro, wo, keys[i%txnBenchKeys], buf)
		}
	})
	b.Run("parallel-distinct", func(b *testing.B) {
		db, keys := benchDB(b)
		ro := grocksdb.NewDefaultReadOptions()
		defer ro.Destroy()
		wo := grocksdb.NewDefaultWriteOptions()
		defer wo.Destroy()
		var next atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			base := int(next.Add(1)-1) * 64
			buf := make([]byte, 8)
			for i := 0; pb.Next(); i++ {
				plainIncrement(b, db, ro, wo, keys[(base+i%64)%txnBenchKeys], buf)
			}
		})
	})
}
