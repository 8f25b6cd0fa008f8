package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// input is go test output with three runs of P1 and one of P5; P3 is met, P1 is not.
const input = `goos: linux
goarch: amd64
pkg: github.com/recordlock/recordlock/bench
cpu: Test CPU
BenchmarkUncontendedLockRelease/recordlock-2   	 100	 300.0 ns/op	 128 B/op	 1 allocs/op
BenchmarkUncontendedLockRelease/recordlock-2   	 100	 100.0 ns/op	 128 B/op	 1 allocs/op
BenchmarkUncontendedLockRelease/recordlock-2   	 100	 200.0 ns/op	 128 B/op	 2 allocs/op
BenchmarkUncontendedLockRelease/moby-2         	 100	  90.0 ns/op	  16 B/op	 1 allocs/op
BenchmarkUncontendedLockRelease/moby-2         	 100	  80.0 ns/op	  16 B/op	 1 allocs/op
BenchmarkUncontendedLockRelease/moby-2         	 100	  70.0 ns/op	  16 B/op	 1 allocs/op
BenchmarkHotKey/recordlock-2   	 100	 120.0 ns/op
BenchmarkHotKey/recordlock-2   	 100	 140.0 ns/op
BenchmarkHotKey/moby-2         	 100	  40.0 ns/op
BenchmarkHotKey/moby-2         	 100	  40.0 ns/op
BenchmarkHeldLockMemory/recordlock-2   	   1	 9 ns/op	 -3.5 %heap-after	 180.0 B/lock
PASS
`

func TestRunTable(t *testing.T) {
	var out strings.Builder
	ok, err := run(strings.NewReader(input), &out, outputs{})
	require.NoError(t, err)
	assert.False(t, ok, "P1 is 200/80 = 2.5× moby, over its 2.0× target")
	assert.Contains(t, out.String(), "Medians of 3 runs; cpu: Test CPU; GOMAXPROCS 2.")
	assert.Contains(t, rowOf(t, out.String(), "P1", "uncontended"), "| 200.0 ns |")
	assert.Contains(t, rowOf(t, out.String(), "P1", "uncontended"), "| moby 80.0 ns |")
	assert.Contains(t, rowOf(t, out.String(), "P1", "uncontended"), "| 2.50× |")
	assert.Contains(t, rowOf(t, out.String(), "P1", "uncontended"), "**not met**")
	assert.Contains(t, rowOf(t, out.String(), "P1", "allocations"), "| met |")
	assert.Contains(t, rowOf(t, out.String(), "P3", "hot key"), "| 3.25× |")
	assert.Contains(t, rowOf(t, out.String(), "P3", "hot key"), "| met |")
	assert.Contains(t, rowOf(t, out.String(), "P4", "unlocked"), "| pending |")
	assert.Contains(t, rowOf(t, out.String(), "P5", "per held lock"), "| 180 B |")
	assert.Contains(t, rowOf(t, out.String(), "P5", "after releasing"), "| -3.5% |")
	assert.Contains(t, rowOf(t, out.String(), "P5", "after releasing"), "| met |")
}

// rowOf returns the table line of target id whose description contains what.
func rowOf(t *testing.T, table, id, what string) string {
	t.Helper()
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, "| "+id+" ") && strings.Contains(l, what) {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	t.Fatalf("no row for %s %q in\n%s", id, what, table)
	return ""
}

func TestRunAllMet(t *testing.T) {
	in := "BenchmarkParallelDistinctKeys/recordlock-2 10 50 ns/op\nBenchmarkParallelDistinctKeys/moby-2 10 100 ns/op\n"
	var out strings.Builder
	ok, err := run(strings.NewReader(in), &out, outputs{})
	require.NoError(t, err)
	assert.True(t, ok, "P2 at 0.5× meets its target and every other row is pending")
}

func TestRunNoResults(t *testing.T) {
	_, err := run(strings.NewReader("PASS\nok x 1s\n"), &strings.Builder{}, outputs{})
	assert.ErrorContains(t, err, "no benchmark results")
}

func TestRunHotRecord(t *testing.T) {
	in := `BenchmarkHotRecord/recordlock-2 	 100	 9000 ns/op	 111111 increments/s	 7.0 us-p50	 900.0 us-p99
BenchmarkHotRecord/rocksdb-2    	 100	 10000 ns/op	 100000 increments/s	 8.0 us-p50	 2000 us-p99
BenchmarkHotRecord/moby-2       	 100	 8000 ns/op	 125000 increments/s	 6.0 us-p50	 2500 us-p99
`
	var out strings.Builder
	ok, err := run(strings.NewReader(in), &out, outputs{})
	require.NoError(t, err)
	assert.False(t, ok, "P8 is 9000/8000 = 1.125× moby's ns/op, over 1/0.9")
	vsRocksDB := rowOf(t, out.String(), "P8", "RocksDB")
	assert.Contains(t, vsRocksDB, "| 0.90× |")
	assert.Contains(t, vsRocksDB, "| met |")
	assert.Contains(t, vsRocksDB, "| moby 8.00 µs; p99: recordlock 900 µs, rocksdb 2000 µs, moby 2500 µs |")
	vsMoby := rowOf(t, out.String(), "P8", "moby/locker")
	assert.Contains(t, vsMoby, "| 1.12× |")
	assert.Contains(t, vsMoby, "| ≤ 1.11× moby |")
	assert.Contains(t, vsMoby, "**not met**")
}

// sweepInput is a main run at GOMAXPROCS 2 followed by the GOMAXPROCS sweep of P2, as `make bench`
// writes it: go test names a result at GOMAXPROCS 1 with no suffix.
const sweepInput = `cpu: Test CPU
BenchmarkParallelDistinctKeys/recordlock-2 	 10	 50 ns/op
BenchmarkParallelDistinctKeys/moby-2       	 10	 100 ns/op
BenchmarkHotKey/recordlock-2 	 10	 300 ns/op
BenchmarkHotKey/moby-2       	 10	 100 ns/op
sweep: gomaxprocs
BenchmarkParallelDistinctKeys/recordlock   	 10	 40 ns/op
BenchmarkParallelDistinctKeys/recordlock   	 10	 42 ns/op
BenchmarkParallelDistinctKeys/moby         	 10	 20 ns/op
BenchmarkParallelDistinctKeys/moby         	 10	 20 ns/op
BenchmarkParallelDistinctKeys/recordlock-2 	 10	 90 ns/op
BenchmarkParallelDistinctKeys/recordlock-2 	 10	 90 ns/op
BenchmarkParallelDistinctKeys/moby-2       	 10	 60 ns/op
BenchmarkParallelDistinctKeys/moby-2       	 10	 60 ns/op
`

func TestRunProcsTable(t *testing.T) {
	var out strings.Builder
	ok, err := run(strings.NewReader(sweepInput), &out, outputs{})
	require.NoError(t, err)
	assert.True(t, ok, "the main table has P2 at 0.5× and P3 at 3.0×, from the main run alone")
	table := out.String()
	assert.Contains(t, table, "Medians of 1 runs; cpu: Test CPU; GOMAXPROCS 2.")
	assert.Contains(t, rowOf(t, table, "P2", "parallel"), "| 50.0 ns | moby 100.0 ns | 0.50× |")
	assert.Contains(t, table, "P2 by GOMAXPROCS (parallel, distinct keys), medians of 2 runs.")
	assert.Contains(t, lineOf(t, table, "| 1 "), "| 1 | 41.0 ns | 20.0 ns | 2.05× |")
	assert.Contains(t, lineOf(t, table, "| 2 "), "| 2 | 90.0 ns | 60.0 ns | 1.50× |")
}

func TestRunProcsWithoutSweep(t *testing.T) {
	// go test -cpu 1,2 with no sweep line: the main table is at the larger GOMAXPROCS, and the
	// table by GOMAXPROCS reads the same run.
	in := `BenchmarkParallelDistinctKeys/recordlock 	 10	 40 ns/op
BenchmarkParallelDistinctKeys/moby       	 10	 20 ns/op
BenchmarkParallelDistinctKeys/recordlock-2 	 10	 90 ns/op
BenchmarkParallelDistinctKeys/moby-2       	 10	 60 ns/op
`
	var out strings.Builder
	_, err := run(strings.NewReader(in), &out, outputs{})
	require.NoError(t, err)
	table := out.String()
	assert.Contains(t, table, "GOMAXPROCS 2.")
	assert.Contains(t, rowOf(t, table, "P2", "parallel"), "| 90.0 ns | moby 60.0 ns | 1.50× |")
	assert.Contains(t, lineOf(t, table, "| 1 "), "| 1 | 40.0 ns | 20.0 ns | 2.00× |")
	assert.Contains(t, lineOf(t, table, "| 2 "), "| 2 | 90.0 ns | 60.0 ns | 1.50× |")
}

func TestRunNoProcsTable(t *testing.T) {
	var out strings.Builder
	_, err := run(strings.NewReader(input), &out, outputs{})
	require.NoError(t, err)
	assert.NotContains(t, out.String(), "by GOMAXPROCS", "the input has no P2 results")
	assert.NotContains(t, out.String(), "Cost bounds", "the input has no results of a cost bound")
}

// lineOf returns the first table line that starts with prefix, its spacing collapsed.
func lineOf(t *testing.T, table, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, prefix) {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	t.Fatalf("no line starting %q in\n%s", prefix, table)
	return ""
}

// queueInput has P10 at 8 and 512 goroutines, two runs of each contender.
const queueInput = `cpu: Test CPU
BenchmarkHotRecordQueue/goroutines=8/recordlock-2 	 100	 10000 ns/op	 6.0 us-p50	 900 us-p99
BenchmarkHotRecordQueue/goroutines=8/recordlock-2 	 100	 12000 ns/op	 6.0 us-p50	 1100 us-p99
BenchmarkHotRecordQueue/goroutines=8/locker-2     	 100	 10000 ns/op	 6.0 us-p50	 800 us-p99
BenchmarkHotRecordQueue/goroutines=8/locker-2     	 100	 10000 ns/op	 6.0 us-p50	 800 us-p99
BenchmarkHotRecordQueue/goroutines=8/rocksdb-2    	 100	 20000 ns/op	 7.0 us-p50	 90 us-p99
BenchmarkHotRecordQueue/goroutines=8/rocksdb-2    	 100	 20000 ns/op	 7.0 us-p50	 90 us-p99
BenchmarkHotRecordQueue/goroutines=512/recordlock-2 	 100	 30000 ns/op	 9000 us-p50	 40000 us-p99
BenchmarkHotRecordQueue/goroutines=512/recordlock-2 	 100	 34000 ns/op	 9000 us-p50	 60000 us-p99
BenchmarkHotRecordQueue/goroutines=512/locker-2     	 100	 20000 ns/op	 9000 us-p50	 30000 us-p99
BenchmarkHotRecordQueue/goroutines=512/locker-2     	 100	 20000 ns/op	 9000 us-p50	 30000 us-p99
BenchmarkHotRecordQueue/goroutines=512/rocksdb-2    	 100	 40000 ns/op	 7.0 us-p50	 500000 us-p99
BenchmarkHotRecordQueue/goroutines=512/rocksdb-2    	 100	 40000 ns/op	 7.0 us-p50	 500000 us-p99
`

func TestRunHotRecordQueue(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "p10.svg")
	var out strings.Builder
	ok, err := run(strings.NewReader(queueInput), &out, outputs{charts: map[*sweep]string{&byQueue: svg}})
	require.NoError(t, err)
	assert.False(t, ok, "P10 at 512 is 32/20 = 1.6× locker, over its 1.25× target")
	table := out.String()
	vsLocker := rowOf(t, table, "P10", "Locker.Lock")
	assert.Contains(t, vsLocker, "| 32.00 µs | locker 20.00 µs | 1.60× | ≤ 1.25× locker | **not met** |")
	assert.Contains(t, vsLocker, "p99: recordlock 50000 µs, locker 30000 µs")
	vsRocksDB := rowOf(t, table, "P10", "RocksDB")
	assert.Contains(t, vsRocksDB, "| 0.80× | ≤ 1.00× rocksdb | met |")

	assert.Contains(t, table, "P10 by goroutines (one hot record, time per committed increment), medians of 2 runs")
	assert.Contains(t, lineOf(t, table, "| 8 "), "| 8 | 11.00 µs (10.00 µs–12.00 µs) | 10.00 µs (10.00 µs–10.00 µs) | 20.00 µs (20.00 µs–20.00 µs) | 1.10× | 0.55× |")
	assert.Contains(t, lineOf(t, table, "| 512 "), "| 512 | 32.00 µs (30.00 µs–34.00 µs) | 20.00 µs (20.00 µs–20.00 µs) | 40.00 µs (40.00 µs–40.00 µs) | 1.60× | 0.80× |")

	chart, err := os.ReadFile(svg)
	require.NoError(t, err, "the chart is written")
	assert.Contains(t, string(chart), "<svg")
	for _, name := range []string{"recordlock Txn", "Locker.Lock + fenced Get/Put", "RocksDB pessimistic txn, deadlock detection", ">512<", ">8<"} {
		assert.Contains(t, string(chart), name)
	}
}

func TestRunNoChartWithoutQueueResults(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "p10.svg")
	var out strings.Builder
	_, err := run(strings.NewReader(input), &out, outputs{charts: map[*sweep]string{&byQueue: svg}})
	require.NoError(t, err)
	assert.NotContains(t, out.String(), "by goroutines")
	_, err = os.Stat(svg)
	assert.ErrorIs(t, err, os.ErrNotExist, "no P10 results, no chart")
}

// sharedInput has two runs of P11's four contenders and of P12's two.
const sharedInput = `cpu: Test CPU
BenchmarkHotPrice/shared-2           	 100	 6000 ns/op	 5.0 us-p50	 100 us-p99
BenchmarkHotPrice/shared-2           	 100	 8000 ns/op	 5.0 us-p50	 300 us-p99
BenchmarkHotPrice/exclusive-2        	 100	 14000 ns/op	 7.0 us-p50	 1000 us-p99
BenchmarkHotPrice/exclusive-2        	 100	 16000 ns/op	 7.0 us-p50	 1000 us-p99
BenchmarkHotPrice/rocksdbshared-2    	 100	 7000 ns/op	 6.0 us-p50	 2000 us-p99
BenchmarkHotPrice/rocksdbshared-2    	 100	 9000 ns/op	 6.0 us-p50	 2000 us-p99
BenchmarkHotPrice/rocksdbexclusive-2 	 100	 20000 ns/op	 8.0 us-p50	 3000 us-p99
BenchmarkHotPrice/rocksdbexclusive-2 	 100	 20000 ns/op	 8.0 us-p50	 3000 us-p99
BenchmarkUncontendedSharedLockRelease/shared-2    	 100	 210 ns/op	 128 B/op	 1 allocs/op
BenchmarkUncontendedSharedLockRelease/shared-2    	 100	 230 ns/op	 128 B/op	 1 allocs/op
BenchmarkUncontendedSharedLockRelease/exclusive-2 	 100	 200 ns/op	 128 B/op	 1 allocs/op
BenchmarkUncontendedSharedLockRelease/exclusive-2 	 100	 200 ns/op	 128 B/op	 1 allocs/op
`

func TestRunSharedLocks(t *testing.T) {
	var out strings.Builder
	ok, err := run(strings.NewReader(sharedInput), &out, outputs{})
	require.NoError(t, err)
	assert.False(t, ok, "P11 is 7/8 = 0.875× RocksDB's shared GetForUpdate, over its 0.85× target")
	table := out.String()
	vsExclusive := rowOf(t, table, "P11", "shared vs exclusive")
	assert.Contains(t, vsExclusive, "| 7.00 µs | exclusive 15.00 µs | 0.47× | ≤ 0.70× exclusive | met |")
	assert.Contains(t, vsExclusive, "| rocksdbshared 8.00 µs, rocksdbexclusive 20.00 µs; p99: shared 200 µs, exclusive 1000 µs, rocksdbshared 2000 µs, rocksdbexclusive 3000 µs |")
	vsRocksDB := rowOf(t, table, "P11", "exclusive=false")
	assert.Contains(t, vsRocksDB, "| 7.00 µs | rocksdbshared 8.00 µs | 0.88× | ≤ 0.85× rocksdbshared | **not met** |")
	assert.Contains(t, rowOf(t, table, "P12", "uncontended"), "| 220.0 ns | exclusive 200.0 ns | 1.10× | ≤ 1.10× exclusive | met |")
}

// rangesInput has two runs of P13's and P14's contenders and of the held-locks sweep at two sizes.
const rangesInput = `cpu: Test CPU
BenchmarkSharedRangeScan/recordlock-2 	 100	 300000 ns/op	 100 B/op	 5 allocs/op
BenchmarkSharedRangeScan/recordlock-2 	 100	 340000 ns/op	 100 B/op	 5 allocs/op
BenchmarkSharedRangeScan/rocksdb-2    	 100	 1600000 ns/op	 100 B/op	 5 allocs/op
BenchmarkSharedRangeScan/rocksdb-2    	 100	 1600000 ns/op	 100 B/op	 5 allocs/op
BenchmarkKeyLockAmongRanges/recordlock-2 	 100	 250 ns/op	 128 B/op	 1 allocs/op
BenchmarkKeyLockAmongRanges/recordlock-2 	 100	 250 ns/op	 128 B/op	 1 allocs/op
BenchmarkKeyLockAmongRanges/noranges-2   	 100	 200 ns/op	 128 B/op	 1 allocs/op
BenchmarkKeyLockAmongRanges/noranges-2   	 100	 200 ns/op	 128 B/op	 1 allocs/op
BenchmarkRangeLockHeld/held=1000/ranges-2 	 100	 500 ns/op
BenchmarkRangeLockHeld/held=1000/ranges-2 	 100	 700 ns/op
BenchmarkRangeLockHeld/held=1000/keys-2 	 100	 400 ns/op
BenchmarkRangeLockHeld/held=1000/keys-2 	 100	 400 ns/op
BenchmarkRangeLockHeld/held=100000/ranges-2 	 100	 900 ns/op
BenchmarkRangeLockHeld/held=100000/ranges-2 	 100	 900 ns/op
BenchmarkRangeLockHeld/held=100000/keys-2 	 100	 800 ns/op
BenchmarkRangeLockHeld/held=100000/keys-2 	 100	 800 ns/op
BenchmarkRangeLockHeld/held=100000/keyinranges-2 	 100	 300 ns/op
BenchmarkRangeLockHeld/held=100000/keyinranges-2 	 100	 300 ns/op
`

func TestRunRanges(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "ranges.svg")
	var out strings.Builder
	ok, err := run(strings.NewReader(rangesInput), &out, outputs{charts: map[*sweep]string{&byHeld: svg}})
	require.NoError(t, err)
	assert.True(t, ok, "P13 is 320/1600 = 0.20× and P14 250/200 = 1.25×: both met, and nothing else measured")
	table := out.String()
	assert.Contains(t, rowOf(t, table, "P13", "1,000 records"), "| 320.00 µs | rocksdb 1.60 ms | 0.20× | ≤ 0.25× rocksdb | met |")
	assert.Contains(t, rowOf(t, table, "P14", "10,000 held ranges"), "| 250.0 ns | noranges 200.0 ns | 1.25× | ≤ 2.00× noranges | met |")

	assert.Contains(t, table, "Ranges by held (uncontended lock and release among n held locks), medians of 2 runs")
	assert.Contains(t, lineOf(t, table, "| 1000 "), "| 1000 | 600.0 ns (500.0 ns–700.0 ns) | 400.0 ns (400.0 ns–400.0 ns) | no data |")
	assert.Contains(t, lineOf(t, table, "| 100000 "), "| 100000 | 900.0 ns (900.0 ns–900.0 ns) | 800.0 ns (800.0 ns–800.0 ns) | 300.0 ns (300.0 ns–300.0 ns) |")

	chart, err := os.ReadFile(svg)
	require.NoError(t, err, "the chart is written")
	for _, name := range []string{"<svg", "a range among n held ranges", "a key among n held ranges", ">100000<", ">1000<"} {
		assert.Contains(t, string(chart), name)
	}
}

// docTemplate is a document with hand-written prose around regions: results, procs and bounds,
// which docInput has results for, and p10, which it has none for.
const docTemplate = `# Benchmarks

Prose before, kept as written.

<!-- benchtable:results -->
an old table
<!-- end -->

Prose between, kept too.
<!-- benchtable:procs -->
<!-- end -->

<!-- benchtable:p10 -->
P10's table of an earlier run, kept: the input has no P10.
<!-- end -->

## Bounds
<!-- benchtable:bounds -->

old bounds

<!-- end -->
The last line, kept.
`

// docInput has P1 and P2, P2's GOMAXPROCS sweep, and one cost bound at three sizes from the core
// module's internal/locktable.
const docInput = `cpu: Test CPU
pkg: github.com/recordlock/recordlock/bench
BenchmarkUncontendedLockRelease/recordlock-2 	 100	 300.0 ns/op	 128 B/op	 1 allocs/op
BenchmarkUncontendedLockRelease/moby-2       	 100	 100.0 ns/op	  16 B/op	 1 allocs/op
BenchmarkUncontendedLockRelease/floor-2      	 100	 250.0 ns/op	 128 B/op	 1 allocs/op
BenchmarkParallelDistinctKeys/recordlock-2   	 100	 50.0 ns/op
BenchmarkParallelDistinctKeys/moby-2         	 100	 100.0 ns/op
pkg: github.com/recordlock/recordlock/internal/locktable
BenchmarkSharedKeyUnderSharedRanges/R=100-2   	 1000	 500.0 ns/op
BenchmarkSharedKeyUnderSharedRanges/R=1000-2  	 1000	 550.0 ns/op
BenchmarkSharedKeyUnderSharedRanges/R=10000-2 	 1000	 600.0 ns/op
sweep: gomaxprocs
BenchmarkParallelDistinctKeys/recordlock   	 100	 40.0 ns/op
BenchmarkParallelDistinctKeys/moby         	 100	 20.0 ns/op
`

func TestRunDoc(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	require.NoError(t, os.WriteFile(doc, []byte(docTemplate), 0o644))
	var out strings.Builder
	ok, err := run(strings.NewReader(docInput), &out, outputs{doc: doc})
	require.NoError(t, err)
	assert.False(t, ok, "P1 is 3.00× moby")
	got, err := os.ReadFile(doc)
	require.NoError(t, err)
	text := string(got)

	assert.NotContains(t, text, "an old table")
	assert.NotContains(t, text, "old bounds")
	assert.Equal(t, []string{"results", "procs", "p10", "bounds"}, regionsOf(text), "every marker kept, in order")
	results := regionText(t, text, "results")
	assert.Contains(t, results, "Medians of 1 runs; cpu: Test CPU; GOMAXPROCS 2.")
	assert.Contains(t, rowOf(t, results, "P1", "uncontended"), "| 300.0 ns | moby 100.0 ns | 3.00× | ≤ 2.00× moby | **not met** |")
	assert.Contains(t, results, "Met: 3 of the 4 rows measured. No results for P3, P4, P5, P6, P8, P9, P10, P11, P12, P13, P14, P15, P16 (a benchmark that failed or did not run). Not met:\n\n- P1, uncontended Lock+Release, 65,536 keys: 3.00× against ≤ 2.00× moby\n")
	assert.Contains(t, lineOf(t, regionText(t, text, "procs"), "| 1 "), "| 1 | 40.0 ns | 20.0 ns | 2.00× |")
	assert.Equal(t, "P10's table of an earlier run, kept: the input has no P10.\n", regionText(t, text, "p10"))
	assert.NotContains(t, regionText(t, text, "bounds"), "BenchmarkKeyLockBesideQueuedRanges", "a bound with no results has no row")
	bounds := lineOf(t, regionText(t, text, "bounds"), "| key lock under R shared ranges")
	assert.Contains(t, bounds, "| `BenchmarkSharedKeyUnderSharedRanges` | 100: 500.0 ns, 1000: 550.0 ns, 10000: 600.0 ns | 1.20× for 100× the size | `TestSharedKeyUnderSharedRangesCostsLogR` |")

	// Outside the regions, the document is as it was, line for line.
	assert.Equal(t, outsideRegions(docTemplate), outsideRegions(text))

	// The same input again leaves the document as it is.
	_, err = run(strings.NewReader(docInput), &strings.Builder{}, outputs{doc: doc})
	require.NoError(t, err)
	again, err := os.ReadFile(doc)
	require.NoError(t, err)
	assert.Equal(t, text, string(again))
}

func TestRunDocErrors(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown region": "a\n<!-- benchtable:nosuch -->\n<!-- end -->\n",
		"no end":         "a\n<!-- benchtable:results -->\nold\n",
		"nested":         "<!-- benchtable:results -->\n<!-- benchtable:procs -->\n<!-- end -->\n<!-- end -->\n",
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "BENCHMARKS.md")
			require.NoError(t, os.WriteFile(file, []byte(doc), 0o644))
			_, err := run(strings.NewReader(docInput), &strings.Builder{}, outputs{doc: file})
			require.Error(t, err)
			got, err := os.ReadFile(file)
			require.NoError(t, err)
			assert.Equal(t, doc, string(got), "the document is left as it was")
		})
	}
}

// regionsOf returns the names of the regions of doc, in order.
func regionsOf(doc string) []string {
	var names []string
	for _, l := range strings.Split(doc, "\n") {
		if name, ok := regionName(l); ok {
			names = append(names, name)
		}
	}
	return names
}

// regionText returns the lines of doc's region name, without its markers.
func regionText(t *testing.T, doc, name string) string {
	t.Helper()
	_, after, ok := strings.Cut(doc, regionStart+name+regionOpen+"\n")
	require.True(t, ok, "no region %s in\n%s", name, doc)
	inside, _, ok := strings.Cut(after, regionEnd)
	require.True(t, ok, "region %s does not end", name)
	return inside
}

// outsideRegions returns doc's lines that are outside every region, the markers included.
func outsideRegions(doc string) []string {
	var kept []string
	inside := false
	for _, l := range strings.Split(doc, "\n") {
		_, starts := regionName(l)
		switch {
		case starts:
			inside = true
			kept = append(kept, l)
		case strings.TrimSpace(l) == regionEnd:
			inside = false
			kept = append(kept, l)
		case !inside:
			kept = append(kept, l)
		}
	}
	return kept
}

// rangeTargetsInput has two runs of P15's and P16's contenders and of P5's with ranges.
const rangeTargetsInput = `BenchmarkParallelDistinctKeysBesideRange/recordlock-2 	 100	 110 ns/op
BenchmarkParallelDistinctKeysBesideRange/recordlock-2 	 100	 130 ns/op
BenchmarkParallelDistinctKeysBesideRange/noranges-2   	 100	 100 ns/op
BenchmarkParallelDistinctKeysBesideRange/noranges-2   	 100	 100 ns/op
BenchmarkFirstRangeDelay/covering-2 	 3	 400000000 ns/op	 1500 maxdelay-µs	 120 p999-µs	 5 over1ms
BenchmarkFirstRangeDelay/covering-2 	 3	 400000000 ns/op	 2500 maxdelay-µs	 140 p999-µs	 7 over1ms
BenchmarkFirstRangeDelay/beside-2   	 3	 100000000 ns/op	 800 maxdelay-µs	 100 p999-µs	 1 over1ms
BenchmarkFirstRangeDelay/beside-2   	 3	 100000000 ns/op	 600 maxdelay-µs	 100 p999-µs	 1 over1ms
BenchmarkFirstRangeDelay/none-2     	 3	 100000000 ns/op	 900 maxdelay-µs	 20 p999-µs	 0 over1ms
BenchmarkFirstRangeDelay/none-2     	 3	 100000000 ns/op	 900 maxdelay-µs	 20 p999-µs	 0 over1ms
BenchmarkHeldLockMemoryWithRanges/keysbeside-2 	 1	 9 ns/op	 240 B/lock	 4.8 %heap-after
BenchmarkHeldLockMemoryWithRanges/keysinside-2 	 1	 9 ns/op	 300 B/lock	 4.8 %heap-after
BenchmarkHeldLockMemoryWithRanges/ranges-2     	 1	 9 ns/op	 377 B/lock	 4.8 %heap-after
`

func TestRunRangeTargets(t *testing.T) {
	var out strings.Builder
	ok, err := run(strings.NewReader(rangeTargetsInput), &out, outputs{})
	require.NoError(t, err)
	assert.False(t, ok, "P16 covering and P5 under a range are over their bounds")
	table := out.String()
	assert.Contains(t, rowOf(t, table, "P15", "range lock held beside"), "| 120.0 ns | noranges 100.0 ns | 1.20× | ≤ 1.15× noranges | **not met** |")
	covering := rowOf(t, table, "P16", "over 100,000")
	assert.Contains(t, covering, "| 2.00 ms | – | – | ≤ 1.00 ms | **not met** | none 900 µs; p999: covering 130 µs, none 20 µs |")
	assert.Contains(t, rowOf(t, table, "P16", "beside 100,000"), "| 700 µs | – | – | ≤ 1.00 ms | met |")
	assert.Contains(t, rowOf(t, table, "P5", "beside a range lock"), "| 240 B | – | – | ≤ 256 B | met |")
	assert.Contains(t, rowOf(t, table, "P5", "under a shared range lock"), "| 300 B | – | – | ≤ 256 B | **not met** |")
	assert.Contains(t, rowOf(t, table, "P5", "per held range lock"), "| 377 B | – | – | ≤ 384 B | met |")
	assert.Contains(t, table, "\n- P15, parallel, distinct keys, a range lock held beside them, vs no range ever taken: 1.20× against ≤ 1.15× noranges\n")
	assert.Contains(t, table, "\n- P16, first range lock, over 100,000 held keys: longest delay of another Lock+Release: 2.00 ms against ≤ 1.00 ms\n")
}
