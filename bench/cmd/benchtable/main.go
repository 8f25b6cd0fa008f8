// Command benchtable reads `go test -bench` output of the bench package on stdin and prints
// markdown tables: for every performance target (P1 … P16), recordlock's median over the -count
// runs (of the sub-benchmark the target measures: P11 and P12 measure the shared lock), the
// peer's median, their ratio, the target and whether it is met, then a line naming the targets
// not met. The table is at one GOMAXPROCS, the one most benchmarks ran at (the larger on a tie).
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
// docs/ranges-held-locks.svg). The last is of the cost bounds of range locks: each bound's
// benchmark at its sizes, from the core module's and internal/locktable's benchmarks when the
// input has them (`make bench` runs them after the bench package's).
//
// With -doc FILE, benchtable also rewrites the regions of the markdown file FILE in place: the
// lines between `<!-- benchtable:NAME -->` and `<!-- end -->` become the table NAME (results,
// procs, p10, held or bounds), and every line outside a region is kept. A table the input has
// no results for leaves its region as it was. `make bench` rewrites BENCHMARKS.md so.
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
	doc := flag.String("doc", "", "also rewrite the benchtable regions of this markdown file")
	flag.Parse()
	ok, err := run(os.Stdin, os.Stdout, outputs{charts: map[*sweep]string{&byQueue: *svg, &byHeld: *rangesSVG}, doc: *doc})
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(2)
	}
	if *check && !ok {
		os.Exit(1)
	}
}

// outputs names the files benchtable writes besides its tables on stdout.
type outputs struct {
	charts map[*sweep]string // the chart of each sweep, into this file unless ""
	doc    string            // the markdown file whose regions to rewrite, unless ""
}

// run reads results from in and writes the tables to out, the chart of each sweep to its file,
// and the tables into the regions of the document. It reports whether every measured target
// was met.
func run(in io.Reader, out io.Writer, files outputs) (bool, error) {
	s, err := readSamples(in)
	if err != nil {
		return false, err
	}
	rows := evaluate(targets, s)
	secs, err := sections(s, rows)
	if err != nil {
		return false, err
	}
	if err := writeTable(out, secs); err != nil {
		return false, err
	}
	for _, sw := range sweeps {
		if file := files.charts[sw]; file != "" {
			if err := writeChart(s, sw, file); err != nil {
				return false, err
			}
		}
	}
	if files.doc != "" {
		if err := rewriteDoc(files.doc, secs); err != nil {
			return false, err
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
