// Command benchtable reads `go test -bench` output of the bench package on stdin and prints a
// markdown table: for every performance target (P1 … P14), recordlock's median over the -count
// runs (of the sub-benchmark the target measures: P11 and P12 measure the shared lock), the
// peer's median, their ratio, the target and whether it is met. The table is at one
// GOMAXPROCS, the one most benchmarks ran at (the larger on a tie).
//
//	cd bench && go test -run '^$' -bench . -benchmem -count 6 | tee bench.out | go run ./cmd/benchtable
//
// A second table follows when the input has P2 at GOMAXPROCS 1 or 2: recordlock against moby at
// each. A `sweep: gomaxprocs` line in the input (as `make bench` writes it before its run of P2
// with -test.cpu 1,2) sends the results after it to that table alone; without one, both tables
// read the same results.
//
// A third table follows when the input has P10 (BenchmarkHotRecordQueue): each contender's time
// per committed increment at each number of goroutines. With -svg FILE, benchtable also draws it
// as a chart into FILE (`make bench` writes docs/p10-hot-record-queue.svg); an input without P10
// leaves FILE as it was. A fourth, of BenchmarkRangeLockHeld, shows the cost of a range or key
// lock at each number of locks held, and -ranges-svg FILE draws it (`make bench` writes
// docs/ranges-held-locks.svg).
//
// With -check it exits with status 1 when a measured target is not met. A target with no
// results (a contender not yet written) is reported as pending and never fails the check.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	check := flag.Bool("check", false, "exit with status 1 when a measured target is not met")
	svg := flag.String("svg", "", "also draw P10's chart, as SVG, into this file")
	rangesSVG := flag.String("ranges-svg", "", "also draw the chart of range locks by locks held, as SVG, into this file")
	flag.Parse()
	ok, err := run(os.Stdin, os.Stdout, map[*sweep]string{&byQueue: *svg, &byHeld: *rangesSVG})
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(2)
	}
	if *check && !ok {
		os.Exit(1)
	}
}

// run reads results from in and writes the table to out, and the chart of each sweep to the file
// charts names for it, unless that is "". It reports whether every measured target was met.
func run(in io.Reader, out io.Writer, charts map[*sweep]string) (bool, error) {
	s, err := readSamples(in)
	if err != nil {
		return false, err
	}
	rows := evaluate(targets, s)
	if err := writeTable(out, s, rows); err != nil {
		return false, err
	}
	for _, sw := range sweeps {
		if file := charts[sw]; file != "" {
			if err := writeChart(s, sw, file); err != nil {
				return false, err
			}
		}
	}
	for _, r := range rows {
		if r.status == statusNotMet {
			return false, nil
		}
	}
	return true, nil
}

// writeChart draws sw's chart into file, or leaves file as it was when the input has no results
// of sw.
func writeChart(s *samples, sw *sweep, file string) error {
	var chart bytes.Buffer
	drawn, err := sw.chart(s, &chart)
	if err != nil {
		return fmt.Errorf("drawing the %s chart: %w", sw.id, err)
	}
	if !drawn {
		return nil
	}
	return os.WriteFile(file, chart.Bytes(), 0o644)
}
