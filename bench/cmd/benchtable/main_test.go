package main

import (
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
	ok, err := run(strings.NewReader(input), &out)
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
	ok, err := run(strings.NewReader(in), &out)
	require.NoError(t, err)
	assert.True(t, ok, "P2 at 0.5× meets its target and every other row is pending")
}

func TestRunNoResults(t *testing.T) {
	_, err := run(strings.NewReader("PASS\nok x 1s\n"), &strings.Builder{})
	assert.ErrorContains(t, err, "no benchmark results")
}
