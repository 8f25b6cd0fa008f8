package recordlock_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock"
)

// The benchmarks of the core on its own, one per performance target (P1 … P4; the target id is in
// each doc comment). The targets themselves, which compare recordlock with its peers, are checked
// by the bench module (bench/, make bench), whose benchmarks carry the same names.

var benchOpts = recordlock.Options{Lease: 30 * time.Second}

// benchKeys returns n distinct keys with the given prefix.
func benchKeys(prefix string, n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "%s/%08d", prefix, i)
	}
	return keys
}

// BenchmarkUncontendedLockRelease (P1) is one goroutine taking and giving back free keys, rotating
// over 65,536 of them so that the table's shards and heaps see many keys, on the system clock.
func BenchmarkUncontendedLockRelease(b *testing.B) { uncontendedLockRelease(b) }

// BenchmarkUncontendedLockReleaseWithMaxLocks is P1 on a Locker with a bound (WithMaxLocks) it
// never reaches: what the bound's counter costs the uncontended path.
func BenchmarkUncontendedLockReleaseWithMaxLocks(b *testing.B) {
	uncontendedLockRelease(b, recordlock.WithMaxLocks(1<<20))
}

func uncontendedLockRelease(b *testing.B, opts ...recordlock.Option) {
	l := newLocker(b, openDB(b), opts...)
	keys := benchKeys("k", 1<<16)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		h, err := l.Lock(ctx, keys[i&(len(keys)-1)], benchOpts)
		if err != nil {
			b.Fatal(err)
		}
		h.Release()
		i++
	}
}

// BenchmarkParallelDistinctKeys (P2) is Lock and Release from GOMAXPROCS goroutines, each on 1,024
// keys no other goroutine uses.
func BenchmarkParallelDistinctKeys(b *testing.B) {
	l := newLocker(b, openDB(b))
	ctx := context.Background()
	var id atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		keys := benchKeys(fmt.Sprint(id.Add(1)), 1024)
		i := 0
		for pb.Next() {
			h, err := l.Lock(ctx, keys[i&(len(keys)-1)], benchOpts)
			if err != nil {
				b.Error(err)
				return
			}
			h.Release()
			i++
		}
	})
}

// BenchmarkHotKey (P3) is 4 goroutines contending for one key; b.N is the total number of
// Lock+Release pairs.
func BenchmarkHotKey(b *testing.B) {
	const goroutines = 4
	l := newLocker(b, openDB(b))
	key := []byte("hot")
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range goroutines {
		n := b.N / goroutines
		if g < b.N%goroutines {
			n++
		}
		wg.Go(func() {
			for range n {
				h, err := l.Lock(ctx, key, benchOpts)
				if err != nil {
					b.Error(err)
					return
				}
				h.Release()
			}
		})
	}
	wg.Wait()
}

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

// BenchmarkTxnReadModifyWrite (P4) measures one fenced increment (Lock, Get, Put, Commit):
// serially over rotating keys, in parallel on distinct keys per goroutine, and in parallel on four
// shared keys.
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

// BenchmarkPlainGetPut is P4's unlocked baseline, BenchmarkTxnReadModifyWrite without the lock on
// the same database settings: a GetBytes and a Put, with no lock and no batch.
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

// BenchmarkStatsMillionHeld is one Stats call on a table holding 1,000,000 keys: the scrape an
// operator runs every second must stay cheap however much is locked.
func BenchmarkStatsMillionHeld(b *testing.B) {
	l := newLocker(b, openDB(b))
	for _, k := range benchKeys("held", 1_000_000) {
		if _, err := l.TryLock(k, benchOpts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if s := l.Stats(); s.Held != 1_000_000 {
			b.Fatalf("Held = %d", s.Held)
		}
	}
}

// BenchmarkLocksSharersAndQueue is one pass of Locks() over a key with 1,000 sharers and 1,000
// requests queued for it: the read a debug page refresh or an OpenTelemetry collection makes,
// all of it under that key's shard mutex.
func BenchmarkLocksSharersAndQueue(b *testing.B) {
	const sharers, queued = 1000, 1000
	clk := recordlock.NewManualClock(time.Unix(1_700_000_000, 0))
	l := newLocker(b, openDB(b), recordlock.WithClock(clk))
	key := []byte("hot")
	for range sharers {
		if _, err := l.Lock(context.Background(), key, recordlock.Options{Shared: true, Lease: time.Minute}); err != nil {
			b.Fatal(err)
		}
	}
	errs := make(chan error, queued)
	for range queued {
		go func() {
			_, err := l.Lock(context.Background(), key, recordlock.Options{Timeout: time.Minute})
			errs <- err
		}()
	}
	waitQueued(b, l, key, queued)
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		for range l.Locks() {
			n++
		}
		if n != sharers {
			b.Fatalf("Locks yielded %d", n)
		}
	}
	b.StopTimer()
	_ = l.Close() // fails the waiters, which would wait on the ManualClock forever
	for range queued {
		<-errs
	}
}
