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
	if s.procs != "" {
		fmt.Fprintf(&b, "; GOMAXPROCS %s", s.procs)
	}
	b.WriteString(".\n\n")
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
	// tabwriter.Debug separates cells with '|'; drop the doubled bars it leaves.
	_, err := io.WriteString(out, strings.ReplaceAll(b.String(), "|| ", "| "))
	return err
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

// others lists the medians of the contenders shown for context.
func others(s *samples, t target) string {
	var cells []string
	for _, name := range t.also {
		v, n := s.median(t.bench+"/"+name, t.unit)
		if n > 0 {
			cells = append(cells, name+" "+show(v, t.unit, statusMet))
		}
	}
	if len(cells) == 0 {
		return "–"
	}
	return strings.Join(cells, ", ")
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
	}
	return fmt.Sprintf("%g %s", v, unit)
}
