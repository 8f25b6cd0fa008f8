package main

import (
	"fmt"
	"strings"
)

// costBound is a cost bound of range locks (docs/DESIGN.md §17) as a benchmark measures it: the
// time per op at growing sizes, from sub-benchmarks named bench/ followed by sub at each size.
// test counts the steps at two sizes and fails when they grow like the wrong bound.
type costBound struct {
	cost, bound string
	bench       string // the benchmark function, without "Benchmark"
	sub         string // the sub-benchmark at size n, a format of n
	sizes       []int
	test        string
}

// costBounds are the bounds in the order of their table. The benchmarks live in the core module
// (BenchmarkTxnKeyInsideOneOfManyRanges), in internal/locktable and in bench (RangeLockHeld).
var costBounds = []costBound{
	{cost: "key lock under R shared ranges that cover it", bound: "O(log R)", bench: "SharedKeyUnderSharedRanges", sub: "R=%d", sizes: []int{100, 1000, 10000}, test: "TestSharedKeyUnderSharedRangesCostsLogR"},
	{cost: "key lock among R held ranges that do not cover it", bound: "O(log R)", bench: "RangeLockHeld", sub: "held=%d/keyinranges", sizes: []int{1000, 10000, 100000}, test: "TestCoversCostsLogN"},
	{cost: "key lock beside Q range requests queued over other keys", bound: "O(log Q)", bench: "KeyLockBesideQueuedRanges", sub: "Q=%d", sizes: []int{50, 500, 2000}, test: "TestKeyLockBesideQueuedRangesCostsLogQ"},
	{cost: "range lock among n held ranges", bound: "O(log n + k)", bench: "RangeLockHeld", sub: "held=%d/ranges", sizes: []int{1000, 10000, 100000}},
	{cost: "range lock among n held keys", bound: "O(log n + k)", bench: "RangeLockHeld", sub: "held=%d/keys", sizes: []int{1000, 10000, 100000}, test: "TestRangeLockAmongHeldKeysCostsLogN"},
	{cost: "Txn Lock and Put of a key inside one of its m ranges", bound: "O(log m)", bench: "TxnKeyInsideOneOfManyRanges", sub: "m=%d", sizes: []int{1000, 8000, 64000}, test: "TestContainingCostsLogM"},
	{cost: "Locks() and Waits(), s = q = n, the ranges over one span", bound: "O(s + q)", bench: "LocksWithRangeSharersAndQueued", sub: "spans=1/%d", sizes: []int{100, 300, 1000}, test: "TestLocksCostsLinearInRangeSharersAndQueued"},
	{cost: "Locks() and Waits(), s = q = n, the ranges over n spans", bound: "O(s + q)", bench: "LocksWithRangeSharersAndQueued", sub: "spans=s/%d", sizes: []int{100, 300, 1000}, test: "TestLocksCostsLinearInRangeSharersAndQueued"},
	{cost: "deadlock check of the last of N Txns queued for one range", bound: "O(1) per Txn on the path", bench: "RangeWaitCheck", sub: "%d", sizes: []int{150, 300, 600}, test: "TestRangeWaitCheckCostsLinearInQueued"},
}

// boundsTable returns the table of costBounds: each one's medians at its sizes and how much the
// largest size's grew over the smallest's; "" when no bound has results.
func boundsTable(s *samples) (string, error) {
	cells := [][]string{
		{"cost", "bound", "benchmark", "median per op at each size", "largest / smallest", "step test"},
		{"---", "---", "---", "---", "---:", "---"},
	}
	runs := 0
	for _, cb := range costBounds {
		var at []string
		var first, last float64
		var firstN, lastN int
		for _, n := range cb.sizes {
			v, m := s.median(cb.bench+"/"+fmt.Sprintf(cb.sub, n), "ns/op")
			if m == 0 {
				continue
			}
			runs = max(runs, m)
			at = append(at, fmt.Sprintf("%d: %s", n, show(v, "ns/op", statusMet)))
			if firstN == 0 {
				first, firstN = v, n
			}
			last, lastN = v, n
		}
		if len(at) == 0 {
			continue
		}
		growth := "–"
		if lastN != firstN {
			growth = fmt.Sprintf("%.2f× for %s× the size", last/first, ratioOf(lastN, firstN))
		}
		test := "–"
		if cb.test != "" {
			test = "`" + cb.test + "`"
		}
		cells = append(cells, []string{cb.cost, cb.bound, "`Benchmark" + cb.bench + "`", strings.Join(at, ", "), growth, test})
	}
	if len(cells) == 2 {
		return "", nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Cost bounds of range locks, medians of %d runs.\n\n", runs)
	err := markdownTable(&b, cells)
	return b.String(), err
}

// ratioOf formats a/b without decimals when it is whole.
func ratioOf(a, b int) string {
	if a%b == 0 {
		return fmt.Sprint(a / b)
	}
	return fmt.Sprintf("%.1f", float64(a)/float64(b))
}
