package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// section is one part of the output, and the text of the region of the same name in the
// document that -doc rewrites.
type section struct {
	name string
	text string // "" when the input has no results for it
}

// sections returns the parts of the output in order: the main table with what it met, P2 by
// GOMAXPROCS, each sweep's table, and the cost bounds'.
func sections(s *samples, rows []row) ([]section, error) {
	results, err := mainTable(s, rows)
	if err != nil {
		return nil, err
	}
	procs, err := procsTable(s)
	if err != nil {
		return nil, err
	}
	secs := []section{{"results", results}, {"procs", procs}}
	for _, sw := range sweeps {
		text, err := sw.table(s)
		if err != nil {
			return nil, err
		}
		secs = append(secs, section{sw.region, text})
	}
	bounds, err := boundsTable(s)
	if err != nil {
		return nil, err
	}
	return append(secs, section{"bounds", bounds}), nil
}

// writeTable writes every section with results to out, a blank line between two.
func writeTable(out io.Writer, secs []section) error {
	var parts []string
	for _, sec := range secs {
		if sec.text != "" {
			parts = append(parts, sec.text)
		}
	}
	_, err := io.WriteString(out, strings.Join(parts, "\n"))
	return err
}

// markdownTable writes rows, the header and its alignment row first, as a markdown table whose
// columns line up.
func markdownTable(b *strings.Builder, rows [][]string) error {
	var t strings.Builder
	tw := tabwriter.NewWriter(&t, 0, 0, 1, ' ', tabwriter.Debug)
	for _, cells := range rows {
		fmt.Fprintf(tw, "| %s |\n", strings.Join(cells, "\t| "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// tabwriter.Debug separates cells with '|'; drop the doubled bars it leaves.
	b.WriteString(strings.ReplaceAll(t.String(), "|| ", "| "))
	return nil
}

// mainTable returns the table of the targets, then a line naming those not met.
func mainTable(s *samples, rows []row) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "Medians of %d runs", s.runs())
	if s.cpu != "" {
		fmt.Fprintf(&b, "; cpu: %s", s.cpu)
	}
	fmt.Fprintf(&b, "; GOMAXPROCS %d.\n\n", s.procs)
	cells := [][]string{
		{"id", "what", "recordlock", "peer", "ratio", "target", "met", "others"},
		{"---", "---", "---:", "---:", "---:", "---", "---", "---"},
	}
	for _, r := range rows {
		cells = append(cells, []string{r.id, r.what, show(r.mine, r.unit, r.status), peerCell(r), ratioCell(r), targetCell(r.target), statusCell(r.status), others(s, r.target)})
	}
	if err := markdownTable(&b, cells); err != nil {
		return "", err
	}
	b.WriteString("\n" + summary(rows) + "\n")
	return b.String(), nil
}

// summary says how many rows were met, lists each row not met with its measure and target, and
// names the targets with a row that has no results.
func summary(rows []row) string {
	var met, measured int
	var notMet, pending []string
	for _, r := range rows {
		switch r.status {
		case statusMet:
			met++
			measured++
		case statusNotMet:
			measured++
			notMet = append(notMet, fmt.Sprintf("- %s, %s: %s against %s", r.id, r.what, measureCell(r), targetCell(r.target)))
		case statusPending:
			if !slices.Contains(pending, r.id) {
				pending = append(pending, r.id)
			}
		}
	}
	text := fmt.Sprintf("Met: %d of the %d rows measured.", met, measured)
	if len(pending) > 0 {
		text += " No results for " + strings.Join(pending, ", ") + " (a benchmark that failed or did not run)."
	}
	if len(notMet) > 0 {
		text += " Not met:\n\n" + strings.Join(notMet, "\n")
	}
	return text
}

// measureCell is what a row's target is checked against: the ratio to the peer, or the median.
func measureCell(r row) string {
	if r.peer != "" {
		return ratioCell(r)
	}
	return show(r.mine, r.unit, r.status)
}

// procsTable returns the table of byProcs, one line per GOMAXPROCS with results, or "" when
// there are none.
func procsTable(s *samples) (string, error) {
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
		return "", nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s by GOMAXPROCS (%s), medians of %d runs.\n\n", byProcs.id, byProcs.what, runs)
	cells := [][]string{
		{"GOMAXPROCS", contender, byProcs.peer, "ratio"},
		{"---:", "---:", "---:", "---:"},
	}
	for _, l := range lines {
		ratio := "–"
		if l.n > 0 && l.m > 0 {
			ratio = fmt.Sprintf("%.2f×", l.mine/l.theirs)
		}
		cells = append(cells, []string{fmt.Sprint(l.procs), showOrNone(l.mine, l.n), showOrNone(l.theirs, l.m), ratio})
	}
	err := markdownTable(&b, cells)
	return b.String(), err
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

// detailName is how the others column names a detail unit, by its part that is not the time
// unit: "us-p99" is "p99", "p999-µs" is "p999".
func detailName(unit string) string {
	before, after, ok := strings.Cut(unit, "-")
	switch {
	case !ok:
		return unit
	case before == "us" || before == "ms":
		return after
	}
	return before
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
	case "maxdelay-µs", "p999-µs":
		if v >= 1e3 {
			return fmt.Sprintf("%.2f ms", v/1e3)
		}
		return fmt.Sprintf("%.0f µs", v)
	}
	return fmt.Sprintf("%g %s", v, unit)
}
