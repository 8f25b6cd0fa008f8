package bench

import (
	"context"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/locker"

	"github.com/recordlock/recordlock"
)

// BenchmarkUncontendedLockRelease (P1) is an uncontended lock and release, rotating over 65,536
// keys. Target: recordlock ≤ 2.0× moby and ≤ 1.5× floor, ≤ 1 alloc/op.
func BenchmarkUncontendedLockRelease(b *testing.B) {
	b.Run("recordlock", func(b *testing.B) {
		l := newLocker(b)
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			h, err := l.Lock(ctx, key(i), lockOpts)
			if err != nil {
				b.Fatal(err)
			}
			h.Release()
		}
	})
	b.Run("moby", func(b *testing.B) {
		l := locker.New()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			k := keyStr(i)
			l.Lock(k)
			_ = l.Unlock(k)
		}
	})
	b.Run("mutex", func(b *testing.B) {
		mus := make([]sync.Mutex, nKeys)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			mu := &mus[i&keyMask]
			mu.Lock()
			//lint:ignore SA2001 an empty critical section is what the bare-mutex contender measures
			mu.Unlock()
		}
	})
	b.Run("rocksdb", func(b *testing.B) {
		fx.open(b)
		var p pointLock
		defer p.destroy()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			p.lock(b, key(i))
			p.unlock(b)
		}
	})
	// floor is what any leased lock pays for an uncontended Lock+Release (leasedFloor); clockalloc
	// is the part of it a lock without a lease does not pay: the two clock reads and the
	// Handle-sized allocation, with no map and no mutex.
	b.Run("floor", func(b *testing.B) {
		f := newLeasedFloor()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			f.lockRelease(b, keyStr(i))
		}
	})
	b.Run("clockalloc", func(b *testing.B) {
		clk := recordlock.SystemClock()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			deadline := clk.Mono() + lockOpts.Lease
			floorSink = &handleSized{deadline: deadline}
			if clk.Mono() >= floorSink.deadline {
				b.Fatal("a 30 s lease lapsed")
			}
		}
	})
}

// BenchmarkUncontendedSharedLockRelease (P12) is P1's uncontended lock and release, rotating over
// the same 65,536 keys, in either mode: shared takes each key with Options.Shared, exclusive
// without, in the same run. Target: shared ≤ 1.1× exclusive.
func BenchmarkUncontendedSharedLockRelease(b *testing.B) {
	for _, shared := range []bool{true, false} {
		name := "exclusive"
		if shared {
			name = "shared"
		}
		b.Run(name, func(b *testing.B) {
			l := newLocker(b)
			ctx := context.Background()
			opts := lockOpts
			opts.Shared = shared
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				h, err := l.Lock(ctx, key(i), opts)
				if err != nil {
					b.Fatal(err)
				}
				if h.Shared() != shared {
					b.Fatalf("Shared() = %t, want %t", h.Shared(), shared)
				}
				h.Release()
			}
		})
	}
}

// handleSized has the size class (128 B) and pointer-ness of a recordlock Handle.
type handleSized struct {
	deadline   time.Duration
	acquiredAt int64
	_          [5]*int // the Handle's pointers: it is scanned by the garbage collector
	_          [72]byte
}

var floorSink *handleSized

// leasedFloor is the least a leased lock of recordlock's contract does for an uncontended Lock
// and Release on the system clock:
//   - a map of the held keys under a mutex, looked up and added to by Lock and deleted from by
//     Release, as moby/locker's is; here one of floorShards maps, chosen by a hash of the key, so
//     that keys of different goroutines rarely share a mutex;
//   - a monotonic read at Lock, for the deadline, and at Release, for whether it passed;
//   - AcquiredAt, a timestamp strictly increasing across the database, minted at Lock from one
//     word every Lock writes;
//   - one allocation of a Handle-sized object with pointers, which the caller may keep after
//     Release.
type leasedFloor struct {
	clk    recordlock.Clock
	seed   maphash.Seed
	shards [floorShards]floorShard
	// wallOffset turns a monotonic reading into a wall one; last is the last timestamp minted.
	wallOffset int64
	last       atomic.Int64
}

const floorShards = 64

type floorShard struct {
	mu   sync.Mutex
	held map[string]*handleSized
	_    [48]byte // a cache line each
}

func newLeasedFloor() *leasedFloor {
	f := &leasedFloor{clk: recordlock.SystemClock(), seed: maphash.MakeSeed()}
	f.wallOffset = f.clk.Now().UnixNano() - int64(f.clk.Mono())
	for i := range f.shards {
		f.shards[i].held = make(map[string]*handleSized)
	}
	return f
}

func (f *leasedFloor) lockRelease(b *testing.B, k string) {
	sh := &f.shards[maphash.String(f.seed, k)%floorShards]
	mono := f.clk.Mono()
	h := &handleSized{deadline: mono + lockOpts.Lease, acquiredAt: f.mint(f.wallOffset + int64(mono))}
	sh.mu.Lock()
	_, busy := sh.held[k]
	if !busy {
		sh.held[k] = h
	}
	sh.mu.Unlock()
	if busy {
		b.Error("an uncontended key was held")
		return
	}
	lapsed := f.clk.Mono() >= h.deadline
	sh.mu.Lock()
	delete(sh.held, k)
	sh.mu.Unlock()
	if lapsed {
		b.Error("a 30 s lease lapsed")
	}
}

// mint returns wall, or the last timestamp minted plus one when wall is not past it.
func (f *leasedFloor) mint(wall int64) int64 {
	for {
		last := f.last.Load()
		next := max(wall, last+1)
		if f.last.CompareAndSwap(last, next) {
			return next
		}
	}
}

// slicer gives each RunParallel goroutine its own slice of the key space, so that no two
// goroutines share a key: sliceKeys keys each, or fewer where more than nKeys/sliceKeys
// goroutines run (RunParallel runs GOMAXPROCS of them).
type slicer struct{ next atomic.Int32 }

const sliceKeys = 4096

// keySlice is one goroutine's keys, from base up to base+mask.
type keySlice struct{ base, mask int }

// at is the number of the key of the goroutine's op i.
func (k keySlice) at(i int) int { return k.base + i&k.mask }

// slice is the next goroutine's slice.
func (s *slicer) slice() keySlice {
	size := sliceKeys
	for size > 1 && runtime.GOMAXPROCS(0)*size > nKeys {
		size /= 2
	}
	n := int(s.next.Add(1) - 1)
	return keySlice{base: n % (nKeys / size) * size, mask: size - 1}
}

// runParallel reports allocations, resets the timer and runs body from every P, each goroutine
// with its own slice of the keys.
func runParallel(b *testing.B, body func(pb *testing.PB, ks keySlice)) {
	var s slicer
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) { body(pb, s.slice()) })
}

// BenchmarkParallelDistinctKeys (P2) is lock and release from every P in parallel, on keys no
// other goroutine uses. Target: recordlock ≤ 1.0× moby.
func BenchmarkParallelDistinctKeys(b *testing.B) {
	b.Run("recordlock", func(b *testing.B) {
		l := newLocker(b)
		ctx := context.Background()
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
	})
	b.Run("moby", func(b *testing.B) {
		l := locker.New()
		runParallel(b, func(pb *testing.PB, ks keySlice) {
			for i := 0; pb.Next(); i++ {
				k := keyStr(ks.at(i))
				l.Lock(k)
				_ = l.Unlock(k)
			}
		})
	})
	// floor is P1's leasedFloor from every P.
	b.Run("floor", func(b *testing.B) {
		f := newLeasedFloor()
		runParallel(b, func(pb *testing.PB, ks keySlice) {
			for i := 0; pb.Next(); i++ {
				f.lockRelease(b, keyStr(ks.at(i)))
			}
		})
	})
	b.Run("mutex", func(b *testing.B) {
		mus := make([]sync.Mutex, nKeys)
		runParallel(b, func(pb *testing.PB, ks keySlice) {
			for i := 0; pb.Next(); i++ {
				mu := &mus[ks.at(i)]
				mu.Lock()
				//lint:ignore SA2001 an empty critical section is what the bare-mutex contender measures
				mu.Unlock()
			}
		})
	})
	b.Run("rocksdb", func(b *testing.B) {
		fx.open(b)
		runParallel(b, func(pb *testing.PB, ks keySlice) {
			var p pointLock
			defer p.destroy()
			for i := 0; pb.Next(); i++ {
				p.lock(b, key(ks.at(i)))
				p.unlock(b)
			}
		})
	})
}

// hotGoroutines is how many goroutines fight over the one key of P3: twice the cores here.
const hotGoroutines = 4

// contend runs b.N lock-unlock pairs split over hotGoroutines goroutines, each with its own
// worker made by newWorker.
func contend(b *testing.B, newWorker func() (op func(), done func())) {
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range hotGoroutines {
		n := b.N / hotGoroutines
		if g < b.N%hotGoroutines {
			n++
		}
		op, done := newWorker()
		wg.Go(func() {
			defer done()
			for range n {
				op()
			}
		})
	}
	wg.Wait()
}

// BenchmarkHotKey (P3) is lock and release of one hot key by 4 goroutines, recordlock with its
// ordinary fairness (FIFO waiters, one wake per release, no waiter passed over for more than 1 ms;
// docs/DESIGN.md §6). Target: recordlock ≤ 4.0× moby.
func BenchmarkHotKey(b *testing.B) {
	hot := key(0)
	b.Run("recordlock", func(b *testing.B) {
		l := newLocker(b)
		ctx := context.Background()
		contend(b, func() (func(), func()) {
			return func() {
				h, err := l.Lock(ctx, hot, lockOpts)
				if err != nil {
					b.Error(err)
					return
				}
				h.Release()
			}, func() {}
		})
	})
	b.Run("moby", func(b *testing.B) {
		l := locker.New()
		k := keyStr(0)
		contend(b, func() (func(), func()) {
			return func() {
				l.Lock(k)
				_ = l.Unlock(k)
			}, func() {}
		})
	})
	b.Run("mutex", func(b *testing.B) {
		var mu sync.Mutex
		contend(b, func() (func(), func()) {
			return func() {
				mu.Lock()
				//lint:ignore SA2001 an empty critical section is what the bare-mutex contender measures
				mu.Unlock()
			}, func() {}
		})
	})
	b.Run("rocksdb", func(b *testing.B) {
		fx.open(b)
		contend(b, func() (func(), func()) {
			p := &pointLock{}
			return func() {
				p.lock(b, hot)
				p.unlock(b)
			}, p.destroy
		})
	})
}
