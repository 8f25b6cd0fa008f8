// Package bench runs recordlock side by side with its peers: sync.Mutex (a bare mutex per key),
// github.com/moby/locker, and RocksDB's own TransactionDB locks, all in one process and one run,
// so that the ratios in BENCHMARKS.md compare like with like on the same machine.
//
// Each performance target (P1 … P16, named in each benchmark's doc comment) is one benchmark
// function named for what it measures (BenchmarkUncontendedLockRelease, …,
// BenchmarkKeyLockAmongRanges) whose sub-benchmarks are the contenders: recordlock, moby,
// mutex, rocksdb, plain, and P1's and P2's floor (the least a leased lock does for the op) and
// clockalloc (the part of it only a leased lock pays);
// for P11 and P12, recordlock's shared and exclusive locks, and RocksDB's GetForUpdate in
// either mode (rocksdbshared, rocksdbexclusive); for P14, noranges, the same lock where no
// range was ever taken. BenchmarkRangeLockHeld, with no target, sweeps the locks held.
// cmd/benchtable turns the output into the table of medians and ratios.
package bench

import (
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/linxGnu/grocksdb"
	"go.uber.org/goleak"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/internal/tempdb"
)

func TestMain(m *testing.M) {
	code := m.Run()
	fx.close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// nKeys is the key space that P1, P2 and P4 rotate over (P2 in slices of sliceKeys).
const (
	nKeys   = 1 << 16
	keyMask = nKeys - 1
)

// keyLen is the length of every record key.
const keyLen = 16

// keyBuf holds the nKeys record keys back to back: one pointer-free allocation, so that the
// benchmark's own live heap gives the garbage collector next to nothing to mark (what each
// contender allocates per op is then what its GC cost reflects).
var keyBuf = func() []byte {
	b := make([]byte, 0, nKeys*keyLen)
	for i := range nKeys {
		b = recordKey(b, i)
	}
	return b
}()

// key returns the record key i (mod nKeys) as bytes, for recordlock and RocksDB.
func key(i int) []byte {
	o := (i & keyMask) * keyLen
	return keyBuf[o : o+keyLen : o+keyLen]
}

// keyStr returns the same key as a string, for moby/locker, without copying: converting on every
// call would charge it an allocation.
func keyStr(i int) string { return unsafe.String(&keyBuf[(i&keyMask)*keyLen], keyLen) }

// recordKey appends the i-th record key ("record/1000000i", keyLen bytes) to dst.
func recordKey(dst []byte, i int) []byte {
	return strconv.AppendInt(append(dst, "record/"...), int64(1e8+i), 10)
}

// fx holds the two databases the lock benchmarks share, opened on first use with the same
// settings: a plain DB for recordlock and the unlocked peer, a TransactionDB for RocksDB's own
// locks. Both hold every record key with an 8-byte value. It also holds the seed that each
// read-modify-write run copies (freshDB, freshTxnDB).
var fx fixtures

type fixtures struct {
	once sync.Once
	err  error
	dir  string
	seed string // a closed database of every record key, in one compacted table file
	db   *grocksdb.DB
	tdb  *grocksdb.TransactionDB
	ro   *grocksdb.ReadOptions
	wo   *grocksdb.WriteOptions
	to   *grocksdb.TransactionOptions
}

func (f *fixtures) open(tb testing.TB) {
	tb.Helper()
	f.once.Do(func() { f.err = f.openOnce() })
	if f.err != nil {
		tb.Fatal(f.err)
	}
}

func (f *fixtures) openOnce() error {
	dir, err := os.MkdirTemp("", "recordlock-bench-")
	if err != nil {
		return err
	}
	f.dir = dir
	if f.db, err = tempdb.OpenAt(dir + "/plain"); err != nil {
		return err
	}
	opts := tempdb.Options()
	defer opts.Destroy()
	topts := grocksdb.NewDefaultTransactionDBOptions()
	defer topts.Destroy()
	if f.tdb, err = grocksdb.OpenTransactionDb(opts, topts, dir+"/txn"); err != nil {
		return err
	}
	f.ro = grocksdb.NewDefaultReadOptions()
	f.wo = grocksdb.NewDefaultWriteOptions()
	f.to = grocksdb.NewDefaultTransactionOptions()
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	for i := range nKeys {
		wb.Put(key(i), make([]byte, 8))
	}
	if err := f.db.Write(f.wo, wb); err != nil {
		return err
	}
	if err := f.tdb.Write(f.wo, wb); err != nil {
		return err
	}
	f.seed = dir + "/seed"
	return writeSeed(f.seed, f.wo, wb)
}

// writeSeed creates the database at dir with the writes of wb, flushed and compacted into one
// table file, and closes it: a copy of it opens with an empty memtable and one sorted run.
func writeSeed(dir string, wo *grocksdb.WriteOptions, wb *grocksdb.WriteBatch) error {
	db, err := tempdb.OpenAt(dir)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.Write(wo, wb); err != nil {
		return err
	}
	fo := grocksdb.NewDefaultFlushOptions()
	defer fo.Destroy()
	fo.SetWait(true)
	if err := db.Flush(fo); err != nil {
		return err
	}
	db.CompactRange(grocksdb.Range{})
	return nil
}

// seedCopy copies the seed database into a new directory, removed when tb's run ends.
func seedCopy(tb testing.TB) string {
	tb.Helper()
	fx.open(tb)
	dir := tb.TempDir()
	if err := os.CopyFS(dir, os.DirFS(fx.seed)); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// freshDB opens a copy of the seed as a plain database, with the settings of every database
// here, closed when tb's run ends.
func freshDB(tb testing.TB) *grocksdb.DB {
	tb.Helper()
	db, err := tempdb.OpenAt(seedCopy(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(db.Close)
	return db
}

// freshTxnDB opens a copy of the seed as a TransactionDB, with the settings of every database
// here, closed when tb's run ends.
func freshTxnDB(tb testing.TB) *grocksdb.TransactionDB {
	tb.Helper()
	dir := seedCopy(tb)
	opts := tempdb.Options()
	defer opts.Destroy()
	topts := grocksdb.NewDefaultTransactionDBOptions()
	defer topts.Destroy()
	tdb, err := grocksdb.OpenTransactionDb(opts, topts, dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(tdb.Close)
	return tdb
}

func (f *fixtures) close() {
	if f.db != nil {
		f.db.Close()
	}
	if f.tdb != nil {
		f.tdb.Close()
	}
	// Each is checked on its own: a nil pointer in an interface is not a nil interface.
	if f.ro != nil {
		f.ro.Destroy()
	}
	if f.wo != nil {
		f.wo.Destroy()
	}
	if f.to != nil {
		f.to.Destroy()
	}
	if f.dir != "" {
		_ = os.RemoveAll(f.dir)
	}
}

// newLocker returns a Locker on the shared plain database with the system clock, closed when the
// benchmark ends.
func newLocker(tb testing.TB) *recordlock.Locker {
	tb.Helper()
	fx.open(tb)
	return lockerOn(tb, fx.db)
}

// lockerOn returns a Locker on db with the system clock, closed when tb's run ends (before db, if
// db was opened for tb first).
func lockerOn(tb testing.TB, db *grocksdb.DB) *recordlock.Locker {
	tb.Helper()
	l, err := recordlock.New(db)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// pointLock is RocksDB's own key lock: a pessimistic transaction that locks one key with
// GetForUpdate and gives it back with Rollback. Begin reuses the transaction object.
type pointLock struct {
	txn *grocksdb.Transaction
}

func (p *pointLock) lock(tb testing.TB, key []byte) {
	p.txn = fx.tdb.TransactionBegin(fx.wo, fx.to, p.txn)
	v, err := p.txn.GetForUpdate(fx.ro, key)
	if err != nil {
		tb.Fatal(err)
	}
	v.Free()
}

func (p *pointLock) unlock(tb testing.TB) {
	if err := p.txn.Rollback(); err != nil {
		tb.Fatal(err)
	}
}

func (p *pointLock) destroy() {
	if p.txn != nil {
		p.txn.Destroy()
	}
}

// reportThroughput reports the b.N ops done in elapsed as unit (ops per second), and the p50 and
// p99 of the latencies each worker recorded, in microseconds with their fraction (an op can take
// less than one).
func reportThroughput(b *testing.B, unit string, elapsed time.Duration, lat [][]time.Duration) {
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), unit)
	b.ReportMetric(us(percentile(all, 50)), "us-p50")
	b.ReportMetric(us(percentile(all, 99)), "us-p99")
}

// percentile returns the p-th percentile of sorted, 0 when it is empty.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

// us is d in microseconds, with its fraction.
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// lockOpts is a node-scoped lock with a 30 s lease, the lock of every recordlock contender.
var lockOpts = recordlock.Options{Lease: 30 * time.Second, Scope: recordlock.ScopeNode}

// increment appends the counter in v plus one to dst and frees v.
func increment(dst []byte, v *grocksdb.Slice) []byte {
	next := incremented(dst, v.Data())
	v.Free()
	return next
}

// incremented appends the 8-byte counter in v plus one to dst.
func incremented(dst, v []byte) []byte {
	var n uint64
	if len(v) == 8 {
		n = binary.BigEndian.Uint64(v)
	}
	return binary.BigEndian.AppendUint64(dst, n+1)
}
