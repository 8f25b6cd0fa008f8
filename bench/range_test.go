package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/bench/internal/rocksshared"
	"github.com/recordlock/recordlock/internal/tempdb"
)

// Range locks. Each benchmark here runs on a database of its own (a fresh copy of the seed): a
// column family that has had a range lock keeps its range space for the rest of the database's
// life, and the other benchmarks must measure a database where none was taken.

// scanLen is the number of consecutive records P13 locks and scans.
const scanLen = 1000

// rangeLockOpts is lockOpts shared: the range lock of P13's recordlock contender.
var rangeLockOpts = recordlock.Options{Lease: lockOpts.Lease, Scope: lockOpts.Scope, Shared: true}

// BenchmarkSharedRangeScan (P13) is a Txn that takes a shared lock on 1,000 consecutive records,
// reads them all in key order and commits, the start rotating over the 65,536 records:
//   - recordlock: Txn.LockRange of the 1,000 records' range, shared, then Txn.Scan of it, then
//     Commit (which writes nothing);
//   - rocksdb: a RocksDB pessimistic transaction iterates the same records with its own iterator
//     and locks each with GetForUpdate(exclusive=false) as it reaches it, then commits.
//
// One op is one Txn. Every run gets its own copy of the seed database, as P4's do.
// Target: recordlock ≤ 0.25× rocksdb.
func BenchmarkSharedRangeScan(b *testing.B) {
	b.Run("recordlock", func(b *testing.B) {
		l := lockerOn(b, freshDB(b))
		ctx := context.Background()
		var seen int
		count := func(_, _ []byte) error { seen++; return nil }
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			r := scanRange(i)
			txn := l.Begin()
			if _, err := txn.LockRange(ctx, r, rangeLockOpts); err != nil {
				b.Fatal(err)
			}
			seen = 0
			if err := txn.Scan(r, count); err != nil {
				b.Fatal(err)
			}
			if err := txn.Commit(); err != nil {
				b.Fatal(err)
			}
			if seen != scanLen {
				b.Fatalf("scanned %d records, want %d", seen, scanLen)
			}
		}
	})
	b.Run("rocksdb", func(b *testing.B) {
		tdb := freshTxnDB(b)
		ro := grocksdb.NewDefaultReadOptions()
		defer ro.Destroy()
		var txn *grocksdb.Transaction
		defer func() {
			if txn != nil {
				txn.Destroy()
			}
		}()
		var buf []byte
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			r := scanRange(i)
			txn = tdb.TransactionBegin(fx.wo, fx.to, txn)
			ro.SetIterateUpperBound(r.End)
			it := txn.NewIterator(ro)
			seen := 0
			for it.Seek(r.Start); it.Valid(); it.Next() {
				k := it.Key()
				var err error
				buf, _, err = rocksshared.GetForUpdate(buf[:0], txn, fx.ro, k.Data(), false)
				k.Free()
				if err != nil {
					b.Fatal(err)
				}
				seen++
			}
			err := it.Err()
			it.Close()
			if err != nil {
				b.Fatal(err)
			}
			if err := txn.Commit(); err != nil {
				b.Fatal(err)
			}
			if seen != scanLen {
				b.Fatalf("scanned %d records, want %d", seen, scanLen)
			}
		}
	})
}

// scanRange is the range of P13's i-th Txn: scanLen consecutive records.
func scanRange(i int) recordlock.Range {
	start := (i * scanLen) % (nKeys - scanLen)
	return recordlock.Range{Start: key(start), End: key(start + scanLen)}
}

// rangesHeld is the number of range locks P14 holds.
const rangesHeld = 10_000

// heldLockOpts is the lock of the ranges and keys held while a benchmark runs: exclusive, with a
// lease that outlasts any run.
var heldLockOpts = recordlock.Options{Lease: recordlock.MaxLease, Scope: recordlock.ScopeNode}

// BenchmarkKeyLockAmongRanges (P14) is P1's uncontended Lock+Release of one key, rotating over
// the 65,536 records, in a column family where 10,000 disjoint range locks are held, each over
// the keys between two records, so that none holds a record and the ranges lie among the keys
// locked:
//   - recordlock: with the 10,000 ranges held by the same Locker;
//   - noranges: the same on a database where no range lock was ever taken.
//
// Target: recordlock ≤ 2.0× noranges.
func BenchmarkKeyLockAmongRanges(b *testing.B) {
	run := func(b *testing.B, ranges int) {
		l := lockerOn(b, freshDB(b))
		ctx := context.Background()
		step := nKeys / max(ranges, 1)
		for j := range ranges {
			// The keys strictly between record j*step and the next one.
			k := key(j * step)
			r := recordlock.Range{Start: append(bytes.Clone(k), 0), End: key(j*step + 1)}
			if _, err := l.LockRange(ctx, r, heldLockOpts); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			h, err := l.Lock(ctx, key(i), lockOpts)
			if err != nil {
				b.Fatal(err)
			}
			h.Release()
		}
	}
	b.Run("recordlock", func(b *testing.B) { run(b, rangesHeld) })
	b.Run("noranges", func(b *testing.B) { run(b, 0) })
}

// heldCounts are the numbers of locks held in BenchmarkRangeLockHeld's sweep.
var heldCounts = []int{1_000, 10_000, 100_000}

// BenchmarkRangeLockHeld is the cost of a lock as the locks held in its column family grow: with
// n held (1,000, 10,000, 100,000), one op is an uncontended lock and release of
//   - ranges: a range, among n held disjoint ranges;
//   - keys: a range, among n held keys;
//   - keyinranges: a key, among n held disjoint ranges (P14's op, at every n).
//
// The held locks and the locked one interleave: held i is over the keys from heldKey(2i) up to
// heldKey(2i+1), or the key heldKey(2i) alone, and the op's range is from heldKey(2j+1) up to
// heldKey(2j+2) (its key heldKey(2j+1)), j rotating over n, so it lies between two held locks and
// conflicts with neither. BENCHMARKS.md draws it as a chart.
func BenchmarkRangeLockHeld(b *testing.B) {
	for _, n := range heldCounts {
		keys := heldKeys(2*n + 1)
		b.Run(fmt.Sprintf("held=%d", n), func(b *testing.B) {
			b.Run("ranges", func(b *testing.B) {
				l := heldLocker(b, keys, n, true)
				benchLockRelease(b, func(j int) (*recordlock.Handle, error) {
					return l.LockRange(context.Background(), recordlock.Range{Start: keys[2*j+1], End: keys[2*j+2]}, lockOpts)
				}, n)
			})
			b.Run("keys", func(b *testing.B) {
				l := heldLocker(b, keys, n, false)
				benchLockRelease(b, func(j int) (*recordlock.Handle, error) {
					return l.LockRange(context.Background(), recordlock.Range{Start: keys[2*j+1], End: keys[2*j+2]}, lockOpts)
				}, n)
			})
			b.Run("keyinranges", func(b *testing.B) {
				l := heldLocker(b, keys, n, true)
				benchLockRelease(b, func(j int) (*recordlock.Handle, error) {
					return l.Lock(context.Background(), keys[2*j+1], lockOpts)
				}, n)
			})
		})
	}
}

// heldKeys returns n keys in ascending order, "held/" and 8 digits.
func heldKeys(n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "held/%08d", i)
	}
	return keys
}

// heldLocker returns a Locker on a fresh database that holds n locks among keys: the ranges from
// keys[2i] up to keys[2i+1] when ranges is true, else the keys keys[2i]. Its database is empty (the
// locks cover keys whether or not they exist), so the setup writes nothing; its column family has
// had a range lock before the held locks are taken, in either case.
func heldLocker(b *testing.B, keys [][]byte, n int, ranges bool) *recordlock.Locker {
	b.Helper()
	l := lockerOn(b, tempdb.New(b))
	ctx := context.Background()
	// The column family's first range lock makes its range space, once: taken and released here,
	// it keeps that out of the timed loop, and the held keys are noted as they are taken.
	h, err := l.LockRange(ctx, recordlock.Prefix([]byte("first/")), heldLockOpts)
	if err != nil {
		b.Fatal(err)
	}
	h.Release()
	start := time.Now()
	for i := range n {
		var err error
		if ranges {
			_, err = l.LockRange(ctx, recordlock.Range{Start: keys[2*i], End: keys[2*i+1]}, heldLockOpts)
		} else {
			_, err = l.Lock(ctx, keys[2*i], heldLockOpts)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	if d := time.Since(start); d > recordlock.MaxLease/2 {
		b.Fatalf("taking %d locks took %v, too close to their lease", n, d)
	}
	return l
}

// benchLockRelease times lock(j) and Release, j rotating over n.
func benchLockRelease(b *testing.B, lock func(j int) (*recordlock.Handle, error), n int) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h, err := lock(i % n)
		if err != nil {
			b.Fatal(err)
		}
		h.Release()
	}
}

// BenchmarkParallelDistinctKeysBesideRange (P15) is P2's parallel Lock+Release of distinct keys,
// in a column family where a range lock is held:
//   - recordlock: with an exclusive range lock over the prefix "other/" held by the same Locker,
//     which none of the keys locked is in;
//   - noranges: the same on a database where no range lock was ever taken.
//
// Target: recordlock ≤ 1.15× noranges, at GOMAXPROCS 2.
func BenchmarkParallelDistinctKeysBesideRange(b *testing.B) {
	run := func(b *testing.B, ranged bool) {
		l := lockerOn(b, tempdb.New(b))
		ctx := context.Background()
		if ranged {
			if _, err := l.LockRange(ctx, recordlock.Prefix([]byte("other/")), heldLockOpts); err != nil {
				b.Fatal(err)
			}
		}
		runParallel(b, func(pb *testing.PB, ks keySlice) {
			for i := 0; pb.Next(); i++ {
				h, err := l.Lock(ctx, key(ks.at(i)), lockOpts)
				if err != nil {
					b.Error(err)
					return
				}
				h.Release()
			}
		})
	}
	b.Run("recordlock", func(b *testing.B) { run(b, true) })
	b.Run("noranges", func(b *testing.B) { run(b, false) })
}

// firstRangeHeld is the number of keys held when P16 takes its column family's first range lock.
const firstRangeHeld = 100_000

// BenchmarkFirstRangeDelay (P16) is how long a column family's first range lock, taken with
// 100,000 keys held in it, delays other goroutines' Lock+Release. One op holds the 100,000 keys
// on a fresh Locker (untimed), then takes the first range while a second goroutine locks and
// releases keys no one holds, one after another, timing each. Reported across all ops:
// maxdelay-µs, the longest of those; p999-µs, the 99.9th percentile; over1ms, how many took
// longer than 1 ms per op. The op's time is the range lock's own.
//   - covering: the range covers every held key (a shared TryLockRange, which fails ErrLocked
//     once it has seen them);
//   - beside: the range covers none of them (an exclusive LockRange of "other/");
//   - none: no range lock, the probe alone for 100 ms: what the host's scheduling and garbage
//     collection delay a Lock+Release by with no range work at all.
//
// Target: maxdelay-µs < 1,000 in covering and beside.
func BenchmarkFirstRangeDelay(b *testing.B) {
	held := heldKeys(firstRangeHeld)
	run := func(b *testing.B, take func(l *recordlock.Locker) error) {
		var delays []time.Duration
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			l := lockerOn(b, tempdb.New(b))
			ctx := context.Background()
			for _, k := range held {
				if _, err := l.Lock(ctx, k, heldLockOpts); err != nil {
					b.Fatal(err)
				}
			}
			stop := make(chan struct{})
			probed := make(chan []time.Duration)
			go func() {
				var ds []time.Duration
				for j := 0; ; j++ {
					select {
					case <-stop:
						probed <- ds
						return
					default:
					}
					t0 := time.Now()
					h, err := l.Lock(ctx, key(j), lockOpts)
					if err != nil {
						b.Error(err)
						probed <- ds
						return
					}
					h.Release()
					ds = append(ds, time.Since(t0))
				}
			}()
			b.StartTimer()
			err := take(l)
			b.StopTimer()
			close(stop)
			delays = append(delays, <-probed...)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
		}
		slices.Sort(delays)
		over := len(delays) - sort.Search(len(delays), func(i int) bool { return delays[i] > time.Millisecond })
		if n := len(delays); n > 0 {
			b.ReportMetric(us(delays[n-1]), "maxdelay-µs")
			b.ReportMetric(us(delays[n*999/1000]), "p999-µs")
		}
		b.ReportMetric(float64(over)/float64(b.N), "over1ms")
	}
	rangeOf := func(r recordlock.Range, shared bool) func(l *recordlock.Locker) error {
		return func(l *recordlock.Locker) error {
			opts := heldLockOpts
			opts.Shared = shared
			h, err := l.TryLockRange(r, opts)
			switch {
			case err == nil:
				h.Release()
			case !shared || !errors.Is(err, recordlock.ErrLocked):
				return err
			}
			return nil
		}
	}
	b.Run("covering", func(b *testing.B) { run(b, rangeOf(recordlock.Prefix([]byte("held/")), true)) })
	b.Run("beside", func(b *testing.B) { run(b, rangeOf(recordlock.Prefix([]byte("other/")), false)) })
	b.Run("none", func(b *testing.B) {
		run(b, func(*recordlock.Locker) error { time.Sleep(100 * time.Millisecond); return nil })
	})
}
