// Command benchtable reads `go test -bench` output of the bench package on stdin and prints one
// markdown table: for every performance target (P1 … P9), recordlock's median over the -count
// runs, the peer's median, their ratio, the target and whether it is met.
//
//	cd bench && go test -run '^$' -bench . -benchmem -count 6 | tee bench.out | go run ./cmd/benchtable
//
// With -check it exits with status 1 when a measured target is not met. A target with no
// results (a contender not yet written) is reported as pending and never fails the check.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	check := flag.Bool("check", false, "exit with status 1 when a measured target is not met")
	flag.Parse()
	ok, err := run(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(2)
	}
	if *check && !ok {
		os.Exit(1)
	}
}

// run reads results from in and writes the table to out. It reports whether every measured
// target was met.
func run(in io.Reader, out io.Writer) (bool, error) {
	s, err := readSamples(in)
	if err != nil {
		return false, err
	}
	rows := evaluate(targets, s)
	if err := writeTable(out, s, rows); err != nil {
		return false, err
	}
	for _, r := range rows {
		if r.status == statusNotMet {
			return false, nil
		}
	}
	return true, nil
}
