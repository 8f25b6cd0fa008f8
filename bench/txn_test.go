package bench

import (
	"encoding/binary"
	"testing"

	"github.com/linxGnu/grocksdb"
)

// BenchmarkP4 is a read-modify-write of one record (read an 8-byte counter, write it back plus
// one), rotating over 65,536 records, on the same RocksDB settings for every contender.
// Target: recordlock ≤ 1.10× plain, ≤ 0.9× rocksdb.
//
// P4 PLACEHOLDER: the recordlock contender (Begin, Lock, Get, Put, Commit on a Txn, SPEC §7) is
// added here once txn.go has landed; until then benchtable reports P4 as pending.
func BenchmarkP4(b *testing.B) {
	// plain is an unlocked Get and Put on the plain database: no isolation at all.
	b.Run("plain", func(b *testing.B) {
		fx.open(b)
		var buf [8]byte
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			k := key(i)
			v, err := fx.db.Get(fx.ro, k)
			if err != nil {
				b.Fatal(err)
			}
			next := increment(buf[:0], v)
			if err := fx.db.Put(fx.wo, k, next); err != nil {
				b.Fatal(err)
			}
		}
	})
	// rocksdb is RocksDB's pessimistic transaction: GetForUpdate locks the key, Commit writes
	// and unlocks it.
	b.Run("rocksdb", func(b *testing.B) {
		fx.open(b)
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
			txn = fx.tdb.TransactionBegin(fx.wo, fx.to, txn)
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

// increment appends the counter in v plus one to dst and frees v.
func increment(dst []byte, v *grocksdb.Slice) []byte {
	var n uint64
	if d := v.Data(); len(d) == 8 {
		n = binary.BigEndian.Uint64(d)
	}
	v.Free()
	return binary.BigEndian.AppendUint64(dst, n+1)
}
