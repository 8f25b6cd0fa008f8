package bench

import (
	"context"
	"runtime"
	"testing"

	"github.com/moby/locker"

	"github.com/recordlock/recordlock"
)

// nHeld is how many locks P5 holds at once.
const nHeld = 1_000_000

// liveHeap returns the bytes of live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// heapCycle measures one cycle of BenchmarkHeldLockMemory: it takes nHeld distinct keys with take, keeping what
// take returns, then gives them all back with give. It returns the live heap per held lock
// (including the 8-byte pointer the caller keeps for each) and the live heap after the release
// relative to the start, in percent.
func heapCycle[H any](b *testing.B, take func(key []byte) H, give func(H)) (perLock, afterPct float64) {
	b.StopTimer()
	var key []byte
	start := liveHeap()
	b.StartTimer()
	held := make([]H, nHeld)
	for i := range held {
		key = recordKey(key[:0], i)
		held[i] = take(key)
	}
	b.StopTimer()
	full := liveHeap()
	b.StartTimer()
	for i := range held {
		give(held[i])
	}
	held = nil // drop the caller's references before measuring
	b.StopTimer()
	end := liveHeap()
	b.StartTimer()
	return (float64(full) - float64(start)) / nHeld, (float64(end) - float64(start)) / float64(start) * 100
}

// BenchmarkHeldLockMemory (P5) holds 1,000,000 locks at once, then releases them all. One op is
// one such cycle. Target: recordlock ≤ 256 B/lock of live heap; afterwards the live heap is back
// within 10% of where it started.
func BenchmarkHeldLockMemory(b *testing.B) {
	b.Run("recordlock", func(b *testing.B) {
		l := newLocker(b)
		ctx := context.Background()
		reportHeap(b, func() (float64, float64) {
			return heapCycle(b, func(key []byte) *recordlock.Handle {
				h, err := l.Lock(ctx, key, lockOpts)
				if err != nil {
					b.Fatal(err)
				}
				return h
			}, func(h *recordlock.Handle) {
				if !h.Release() {
					b.Fatal("release of a held lock failed")
				}
			})
		})
	})
	b.Run("moby", func(b *testing.B) {
		l := locker.New()
		reportHeap(b, func() (float64, float64) {
			return heapCycle(b, func(key []byte) string {
				k := string(key)
				l.Lock(k)
				return k
			}, func(k string) {
				if err := l.Unlock(k); err != nil {
					b.Fatal(err)
				}
			})
		})
	})
}

// reportHeap runs b.N cycles and reports their mean B/lock and after-release heap.
func reportHeap(b *testing.B, cycle func() (perLock, afterPct float64)) {
	b.ReportAllocs()
	var sumPer, sumAfter float64
	for range b.N {
		p, a := cycle()
		sumPer += p
		sumAfter += a
	}
	b.ReportMetric(sumPer/float64(b.N), "B/lock")
	b.ReportMetric(sumAfter/float64(b.N), "%heap-after")
}

// BenchmarkHeldLockMemoryWithRanges is P5 in a column family with range locks in use: one op
// holds 1,000,000 locks at once, then releases them all.
//   - keysbeside: key locks, beside an exclusive range lock held over the prefix "other/";
//   - keysinside: shared key locks, under a shared range lock held over all of them, so that
//     every one is kept in the column family's home shard;
//   - ranges: range locks, each over the keys from one record up to the next key after it.
//
// Target: ≤ 256 B/lock for key locks, ≤ 384 B/lock for range locks.
func BenchmarkHeldLockMemoryWithRanges(b *testing.B) {
	ctx := context.Background()
	keyCycle := func(b *testing.B, l *recordlock.Locker, opts recordlock.Options) {
		reportHeap(b, func() (float64, float64) {
			return heapCycle(b, func(key []byte) *recordlock.Handle {
				h, err := l.Lock(ctx, key, opts)
				if err != nil {
					b.Fatal(err)
				}
				return h
			}, func(h *recordlock.Handle) {
				if !h.Release() {
					b.Fatal("release of a held lock failed")
				}
			})
		})
	}
	b.Run("keysbeside", func(b *testing.B) {
		l := newLocker(b)
		r, err := l.LockRange(ctx, recordlock.Prefix([]byte("other/")), heldLockOpts)
		if err != nil {
			b.Fatal(err)
		}
		defer r.Release()
		keyCycle(b, l, lockOpts)
	})
	b.Run("keysinside", func(b *testing.B) {
		l := newLocker(b)
		shared := lockOpts
		shared.Shared = true
		sharedHeld := heldLockOpts
		sharedHeld.Shared = true
		r, err := l.LockRange(ctx, recordlock.Prefix(nil), sharedHeld)
		if err != nil {
			b.Fatal(err)
		}
		defer r.Release()
		keyCycle(b, l, shared)
	})
	b.Run("ranges", func(b *testing.B) {
		l := newLocker(b)
		reportHeap(b, func() (float64, float64) {
			return heapCycle(b, func(key []byte) *recordlock.Handle {
				h, err := l.LockRange(ctx, recordlock.Range{Start: key, End: append(key, 0)}, lockOpts)
				if err != nil {
					b.Fatal(err)
				}
				return h
			}, func(h *recordlock.Handle) {
				if !h.Release() {
					b.Fatal("release of a held lock failed")
				}
			})
		})
	})
}
