package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

func writeTable(out io.Writer, s *samples, rows []row) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Medians of %d runs", s.runs())
	if s.cpu != "" {
		fmt.Fprintf(&b, "; cpu: %s", s.cpu)
	}
	fmt.Fprintf(&b, "; GOMAXPROCS %d.\n\n", s.procs)
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.Debug)
	line := func(cells ...string) { fmt.Fprintf(tw, "| %s |\n", strings.Join(cells, "\t| ")) }
	line("id", "what", "recordlock", "peer", "ratio", "target", "met", "others")
	line("---", "---", "---:", "---:", "---:", "---", "---", "---")
	for _, r := range rows {
		line(r.id, r.what, show(r.mine, r.unit, r.status), peerCell(r), ratioCell(r), targetCell(r.target), statusCell(r.status), others(s, r.target))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeProcsTable(&b, s); err != nil {
		return err
	}
	for _, sw := range sweeps {
		if err := sw.writeTable(&b, s); err != nil {
			return err
		}
	}
	// tabwriter.Debug separates cells with '|'; drop the doubled bars it leaves.
	_, err := io.WriteString(out, strings.ReplaceAll(b.String(), "|| ", "| "))
	return err
}

// writeProcsTable writes the table of byProcs, one line per GOMAXPROCS with results, or nothing
// when there are none.
func writeProcsTable(b *strings.Builder, s *samples) error {
	type line struct {
		procs        int
		mine, theirs float64
		n, m         int
	}
	var lines []line
	runs := 0
	for _, procs := range byProcs.procs {
		l := line{procs: procs}
		l.mine, l.n = s.medianAt(byProcs.bench+"/"+contender, procs, "ns/op")
		l.theirs, l.m = s.medianAt(byProcs.bench+"/"+byProcs.peer, procs, "ns/op")
		if l.n > 0 || l.m > 0 {
			lines = append(lines, l)
			runs = max(runs, l.n, l.m)
		}
	}
	if len(lines) == 0 {
		return nil
	}
	fmt.Fprintf(b, "\n%s by GOMAXPROCS (%s), medians of %d runs.\n\n", byProcs.id, byProcs.what, runs)
	tw := tabwriter.NewWriter(b, 0, 0, 1, ' ', tabwriter.Debug)
	cells := func(cells ...string) { fmt.Fprintf(tw, "| %s |\n", strings.Join(cells, "\t| ")) }
	cells("GOMAXPROCS", contender, byProcs.peer, "ratio")
	cells("---:", "---:", "---:", "---:")
	for _, l := range lines {
		ratio := "–"
		if l.n > 0 && l.m > 0 {
			ratio = fmt.Sprintf("%.2f×", l.mine/l.theirs)
		}
		cells(fmt.Sprint(l.procs), showOrNone(l.mine, l.n), showOrNone(l.theirs, l.m), ratio)
	}
	return tw.Flush()
}

// showOrNone formats a median of n values in ns/op, "no data" when n is 0.
func showOrNone(v float64, n int) string {
	if n == 0 {
		return "no data"
	}
	return show(v, "ns/op", statusMet)
}

func peerCell(r row) string {
	if r.peer == "" {
		return "–"
	}
	return r.peer + " " + show(r.theirs, r.unit, r.status)
}

func ratioCell(r row) string {
	if r.peer == "" || r.status == statusPending {
		return "–"
	}
	return fmt.Sprintf("%.2f×", r.measure)
}

func targetCell(t target) string {
	if t.peer != "" {
		return fmt.Sprintf("≤ %.2f× %s", t.limit, t.peer)
	}
	if t.abs {
		return fmt.Sprintf("within ±%.0f%%", t.limit)
	}
	return "≤ " + show(t.limit, t.unit, statusMet)
}

func statusCell(st status) string {
	switch st {
	case statusMet:
		return "met"
	case statusNotMet:
		return "**not met**"
	}
	return "pending"
}

// others lists the medians of the contenders shown for context, then those in the detail unit.
func others(s *samples, t target) string {
	var parts []string
	if cells := medians(s, t.bench, t.unit, t.also); cells != "" {
		parts = append(parts, cells)
	}
	if t.detail != "" {
		mine := t.mine
		if mine == "" {
			mine = contender
		}
		names := []string{mine}
		if t.peer != "" {
			names = append(names, t.peer)
		}
		names = append(names, t.also...)
		if cells := medians(s, t.bench, t.detail, names); cells != "" {
			parts = append(parts, detailName(t.detail)+": "+cells)
		}
	}
	if len(parts) == 0 {
		return "–"
	}
	return strings.Join(parts, "; ")
}

// medians lists "name median" in unit for each of names with results, "" when none has any.
func medians(s *samples, bench, unit string, names []string) string {
	var cells []string
	for _, name := range names {
		v, n := s.median(bench+"/"+name, unit)
		if n > 0 {
			cells = append(cells, name+" "+show(v, unit, statusMet))
		}
	}
	return strings.Join(cells, ", ")
}

// detailName is how the others column names a detail unit: "us-p99" is "p99".
func detailName(unit string) string {
	if _, after, ok := strings.Cut(unit, "-"); ok {
		return after
	}
	return unit
}

// show formats a median in its unit, durations with a readable scale.
func show(v float64, unit string, st status) string {
	if st == statusPending && v == 0 {
		return "no data"
	}
	switch unit {
	case "ns/op":
		switch {
		case v >= 1e6:
			return fmt.Sprintf("%.2f ms", v/1e6)
		case v >= 1e3:
			return fmt.Sprintf("%.2f µs", v/1e3)
		}
		return fmt.Sprintf("%.1f ns", v)
	case "allocs/op":
		return fmt.Sprintf("%.0f allocs", v)
	case "B/lock":
		return fmt.Sprintf("%.0f B", v)
	case "%heap-after":
		return fmt.Sprintf("%+.1f%%", v)
	case "ms-max-delay", "ms-p99-delay":
		return fmt.Sprintf("%.0f ms", v)
	case "us-p50", "us-p99":
		return fmt.Sprintf("%.0f µs", v)
	}
	return fmt.Sprintf("%g %s", v, unit)
}
