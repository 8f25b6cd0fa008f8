package bench

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/moby/locker"

	"github.com/recordlock/recordlock"
)

// hotRecordWorkers is how many goroutines of P8 increment the one counter.
const hotRecordWorkers = 8

// BenchmarkHotRecord (P8) is a hot record: 8 goroutines increment one 8-byte counter, each
// increment a read-modify-write under the contender's lock. One op is one committed increment;
// the metrics are committed increments per second, the p50 and p99 latency of an increment, and
// the process's CPU time per increment.
// After each run the counter must equal the increments done: a lost update fails the benchmark.
// Every run gets a fresh copy of the seed database, whose counter starts at zero.
// Target: recordlock ≥ 1.0× rocksdb's increments/s and ≥ 0.9× moby's.
func BenchmarkHotRecord(b *testing.B) {
	hot := key(0)
	// recordlock is a Txn: Lock, Get, Put, and Commit, which writes inside the lock's fence and
	// releases the lock.
	b.Run("recordlock", func(b *testing.B) {
		db := freshDB(b)
		l := lockerOn(b, db)
		ctx := context.Background()
		runIncrements(b, hotRecordWorkers, func(int) error { return txnIncrement(ctx, l, hot) })
		checkCounter(b, func() (*grocksdb.Slice, error) { return db.Get(fx.ro, hot) })
		reportWaited(b, l)
	})
	// rocksdb is RocksDB's pessimistic transaction: GetForUpdate locks the key (waiting for it
	// while another transaction holds it), Commit writes and unlocks it.
	b.Run("rocksdb", func(b *testing.B) {
		tdb := freshTxnDB(b)
		txns := newTxnSlots(hotRecordWorkers)
		defer txns.destroy()
		runIncrements(b, hotRecordWorkers, func(w int) error { return txns.increment(tdb, fx.to, w, hot) })
		checkCounter(b, func() (*grocksdb.Slice, error) { return tdb.Get(fx.ro, hot) })
	})
	// moby is a moby/locker lock around a plain Get and Put: exclusion with no lease, fence or
	// transaction.
	b.Run("moby", func(b *testing.B) {
		db := freshDB(b)
		l := locker.New()
		k := keyStr(0)
		runIncrements(b, hotRecordWorkers, func(int) error {
			l.Lock(k)
			defer func() { _ = l.Unlock(k) }()
			v, err := db.Get(fx.ro, hot)
			if err != nil {
				return err
			}
			var buf [8]byte
			return db.Put(fx.wo, hot, increment(buf[:0], v))
		})
		checkCounter(b, func() (*grocksdb.Slice, error) { return db.Get(fx.ro, hot) })
	})
}

// reportWaited reports the share of l's grants that waited in the key's queue (%waited); the
// others went to callers that found the key free, or took it ahead of a woken waiter within the
// barging window.
func reportWaited(b *testing.B, l *recordlock.Locker) {
	if st := l.Stats(); st.Acquired > 0 {
		b.ReportMetric(100*float64(st.Contended)/float64(st.Acquired), "%waited")
	}
}

// txnIncrement is one recordlock increment of the counter at k: a Txn that locks k, reads it,
// stages the new value and commits, which writes inside the lock's fence and releases the lock.
func txnIncrement(ctx context.Context, l *recordlock.Locker, k []byte) error {
	txn := l.Begin()
	defer txn.Rollback()
	if _, err := txn.Lock(ctx, k, lockOpts); err != nil {
		return err
	}
	v, err := txn.Get(k)
	if err != nil {
		return err
	}
	var buf [8]byte
	if err := txn.Put(k, incremented(buf[:0], v)); err != nil {
		return err
	}
	return txn.Commit()
}

// txnSlots holds one reusable RocksDB transaction per worker.
type txnSlots []*grocksdb.Transaction

func newTxnSlots(workers int) txnSlots { return make(txnSlots, workers) }

// increment is one RocksDB increment of the counter at k by worker w: a pessimistic transaction
// whose GetForUpdate locks k (waiting while another transaction holds it) and whose Commit
// writes and unlocks it.
func (s txnSlots) increment(tdb *grocksdb.TransactionDB, to *grocksdb.TransactionOptions, w int, k []byte) error {
	s[w] = tdb.TransactionBegin(fx.wo, to, s[w])
	txn := s[w]
	v, err := txn.GetForUpdate(fx.ro, k)
	if err != nil {
		_ = txn.Rollback()
		return err
	}
	var buf [8]byte
	if err := txn.Put(k, increment(buf[:0], v)); err != nil {
		_ = txn.Rollback()
		return err
	}
	return txn.Commit()
}

func (s txnSlots) destroy() {
	for _, txn := range s {
		if txn != nil {
			txn.Destroy()
		}
	}
}

// runIncrements runs b.N increments split over workers goroutines, calling inc with the number
// of the worker, and reports the metrics of BenchmarkHotRecord. The first error fails the run
// once every worker has stopped.
func runIncrements(b *testing.B, workers int, inc func(worker int) error) {
	runOps(b, workers, "increments/s", inc)
}

// runOps runs b.N ops split over workers goroutines, calling op with the number of the worker,
// and reports the ops per second as unit, the p50 and p99 latency of an op, and the process's
// CPU time per op (cpu-ns/op: user and system, RocksDB's threads included), which tells work
// from waiting on a host whose free cores come and go. The first error fails the run once every
// worker has stopped.
func runOps(b *testing.B, workers int, unit string, op func(worker int) error) {
	var next atomic.Int64
	lat := make([][]time.Duration, workers)
	for w := range lat {
		lat[w] = make([]time.Duration, 0, b.N/workers+1)
	}
	var failed atomic.Pointer[error]
	b.ReportAllocs()
	b.ResetTimer()
	start, cpuStart := time.Now(), cpuTime(b)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := op(w); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), cpuTime(b)-cpuStart
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	reportThroughput(b, unit, elapsed, lat)
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the CPU time the process has used so far, user and system, on every thread.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// checkCounter fails b unless the counter that get reads equals b.N, the increments of the run.
func checkCounter(b *testing.B, get func() (*grocksdb.Slice, error)) {
	b.Helper()
	v, err := get()
	if err != nil {
		b.Fatal(err)
	}
	defer v.Free()
	if len(v.Data()) != 8 {
		b.Fatalf("counter is %d bytes, want 8", len(v.Data()))
	}
	if n := binary.BigEndian.Uint64(v.Data()); n != uint64(b.N) {
		b.Fatalf("counter is %d after %d increments: %d updates lost", n, b.N, int64(b.N)-int64(n))
	}
}
