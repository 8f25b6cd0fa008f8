package main

import "math"

// contender is the sub-benchmark name of recordlock in every target.
const contender = "recordlock"

// target is one row of the table: one criterion of one target id.
type target struct {
	id    string // P1 … P16
	bench string // the benchmark function, without "Benchmark"; its sub-benchmarks are the contenders
	mine  string // the sub-benchmark measured; "" for contender
	what  string
	unit  string // as go test prints it
	peer  string // sub-benchmark the ratio is taken to; "" for an absolute bound
	limit float64
	abs   bool     // compare |value| (a change that must stay small either way)
	also  []string // other contenders shown for context
	// detail is a second unit (e.g. "us-p99") whose medians for mine, the peer and also follow
	// them in the others column; "" for none.
	detail string
}

// targets are the performance targets, in order.
var targets = []target{
	{id: "P1", bench: "UncontendedLockRelease", what: "uncontended Lock+Release, 65,536 keys", unit: "ns/op", peer: "moby", limit: 2.0, also: []string{"floor", "clockalloc", "mutex", "rocksdb"}},
	// floor is the least a leased lock does for the same op: a map under a mutex, the clock reads,
	// AcquiredAt's mint and the Handle's allocation (bench/lock_test.go, leasedFloor).
	{id: "P1", bench: "UncontendedLockRelease", what: "uncontended Lock+Release, vs the least a leased lock does", unit: "ns/op", peer: "floor", limit: 1.5},
	{id: "P1", bench: "UncontendedLockRelease", what: "allocations per Lock+Release", unit: "allocs/op", limit: 1},
	{id: "P2", bench: "ParallelDistinctKeys", what: "parallel, distinct keys", unit: "ns/op", peer: "moby", limit: 1.0, also: []string{"floor", "mutex", "rocksdb"}},
	{id: "P3", bench: "HotKey", what: "one hot key, 4 goroutines", unit: "ns/op", peer: "moby", limit: 4.0, also: []string{"mutex", "rocksdb"}},
	{id: "P4", bench: "TxnReadModifyWrite", what: "Txn read-modify-write vs unlocked Get+Put", unit: "ns/op", peer: "plain", limit: 1.10},
	{id: "P4", bench: "TxnReadModifyWrite", what: "Txn read-modify-write vs RocksDB pessimistic txn", unit: "ns/op", peer: "rocksdb", limit: 0.9},
	{id: "P5", bench: "HeldLockMemory", what: "live heap per held lock, 1,000,000 held", unit: "B/lock", limit: 256, also: []string{"moby"}},
	{id: "P5", bench: "HeldLockMemory", what: "live heap after releasing all, vs start", unit: "%heap-after", limit: 10, abs: true, also: []string{"moby"}},
	// Key locks in a column family with a range lock in use stay within P5's bound; a held range
	// lock has one of its own.
	{id: "P5", bench: "HeldLockMemoryWithRanges", mine: "keysbeside", what: "live heap per held key lock, beside a range lock, 1,000,000 held", unit: "B/lock", limit: 256},
	{id: "P5", bench: "HeldLockMemoryWithRanges", mine: "keysinside", what: "live heap per held shared key lock, under a shared range lock over them all", unit: "B/lock", limit: 256},
	{id: "P5", bench: "HeldLockMemoryWithRanges", mine: "ranges", what: "live heap per held range lock, 1,000,000 held", unit: "B/lock", limit: 384},
	{id: "P6", bench: "LapsingLeases", what: "100,000 lapsing leases: max deadline-to-waiter delay", unit: "ms-max-delay", limit: 1000},
	{id: "P6", bench: "LapsingLeases", what: "100,000 lapsing leases: p99 deadline-to-waiter delay", unit: "ms-p99-delay", limit: 1000},
	// One op is one committed increment: at least 1.0× RocksDB's increments/s is at most 1.0× its
	// ns/op, at least 0.9× moby's is at most 1/0.9 of its ns/op.
	{id: "P8", bench: "HotRecord", what: "hot record, 8 goroutines increment one counter, vs RocksDB pessimistic txn", unit: "ns/op", peer: "rocksdb", limit: 1.0, also: []string{"moby"}, detail: "us-p99"},
	{id: "P8", bench: "HotRecord", what: "hot record, 8 goroutines increment one counter, vs moby/locker Get+Put", unit: "ns/op", peer: "moby", limit: 1 / 0.9},
	// One op is one committed transfer, so a ratio of ns/op is the inverse of the throughput ratio:
	// at least 1.5× RocksDB's transfers/s is at most 1/1.5 of its ns/op.
	{id: "P9", bench: "DeadlockProneTransfers", what: "deadlock-prone transfers, from→to order with detection", unit: "ns/op", peer: "rocksdb", limit: 1 / 1.5},
	{id: "P9", bench: "DeadlockProneTransfers", mine: "lockall", what: "deadlock-prone transfers, sorted with LockAll", unit: "ns/op", peer: "rocksdb", limit: 1 / 2.5},
	// One op is one committed increment; the Txn's wait is checked for deadlocks, Locker.Lock's
	// is not, so the first row is what detection costs when 512 requests queue for one record.
	{id: "P10", bench: "HotRecordQueue/goroutines=512", what: "hot record, 512 goroutines, Txn vs Locker.Lock + fenced Get/Put", unit: "ns/op", peer: "locker", limit: 1.25, detail: "us-p99"},
	{id: "P10", bench: "HotRecordQueue/goroutines=512", what: "hot record, 512 goroutines, Txn vs RocksDB pessimistic txn with detection", unit: "ns/op", peer: "rocksdb", limit: 1.0},
	// One op is one committed order; the price is locked shared (mine) or exclusively, by
	// recordlock or by RocksDB's GetForUpdate. unlocked reads it with no lock: shared cannot beat
	// it, so unlocked over exclusive is the least the first row can read on the host.
	{id: "P11", bench: "HotPrice", mine: "shared", what: "read-mostly hot record, 8 goroutines, price shared vs exclusive", unit: "ns/op", peer: "exclusive", limit: 0.7, also: []string{"unlocked", "rocksdbshared", "rocksdbexclusive"}, detail: "us-p99"},
	{id: "P11", bench: "HotPrice", mine: "shared", what: "read-mostly hot record, 8 goroutines, vs RocksDB GetForUpdate(exclusive=false)", unit: "ns/op", peer: "rocksdbshared", limit: 0.85},
	{id: "P12", bench: "UncontendedSharedLockRelease", mine: "shared", what: "uncontended Lock+Release, shared vs exclusive", unit: "ns/op", peer: "exclusive", limit: 1.1},
	// One op is one Txn over 1,000 records; RocksDB locks each as its iterator reaches it.
	{id: "P13", bench: "SharedRangeScan", what: "Txn: shared lock on 1,000 records, scan, commit, vs RocksDB iterator + GetForUpdate(exclusive=false) each", unit: "ns/op", peer: "rocksdb", limit: 0.25},
	{id: "P14", bench: "KeyLockAmongRanges", what: "uncontended Lock+Release among 10,000 held ranges, vs no range ever taken", unit: "ns/op", peer: "noranges", limit: 2.0},
	{id: "P15", bench: "ParallelDistinctKeysBesideRange", what: "parallel, distinct keys, a range lock held beside them, vs no range ever taken", unit: "ns/op", peer: "noranges", limit: 1.15},
	// The longest delay of a Lock+Release of another goroutine while a column family's first range
	// lock is taken, 100,000 keys held; none is the same probe with no range lock.
	{id: "P16", bench: "FirstRangeDelay", mine: "covering", what: "first range lock, over 100,000 held keys: longest delay of another Lock+Release", unit: "maxdelay-µs", limit: 1000, also: []string{"none"}, detail: "p999-µs"},
	{id: "P16", bench: "FirstRangeDelay", mine: "beside", what: "first range lock, beside 100,000 held keys: longest delay of another Lock+Release", unit: "maxdelay-µs", limit: 1000, also: []string{"none"}, detail: "p999-µs"},
}

// byProcs is the benchmark shown by GOMAXPROCS in the table after the main one: recordlock
// against peer, in ns/op, at each of procs.
var byProcs = struct {
	id, bench, what, peer string
	procs                 []int
}{id: "P2", bench: "ParallelDistinctKeys", what: "parallel, distinct keys", peer: "moby", procs: []int{1, 2}}

type status int

const (
	statusPending status = iota // no results for recordlock or its peer
	statusMet
	statusNotMet
)

// row is a target evaluated against the samples.
type row struct {
	target
	mine, theirs float64 // medians; theirs only with a peer
	measure      float64 // the ratio with a peer, else mine
	status       status
}

func evaluate(ts []target, s *samples) []row {
	rows := make([]row, 0, len(ts))
	for _, t := range ts {
		r := row{target: t}
		var n, m int
		mine := t.mine
		if mine == "" {
			mine = contender
		}
		r.mine, n = s.median(t.bench+"/"+mine, t.unit)
		r.measure, m = r.mine, 1
		if t.peer != "" {
			r.theirs, m = s.median(t.bench+"/"+t.peer, t.unit)
			r.measure = r.mine / r.theirs
		}
		v := r.measure
		if t.abs {
			v = math.Abs(v)
		}
		switch {
		case n == 0 || m == 0:
			r.status = statusPending
		case v <= t.limit:
			r.status = statusMet
		default:
			r.status = statusNotMet
		}
		rows = append(rows, r)
	}
	return rows
}
