package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/perf/benchfmt"
)

// sweepKey is the configuration line (`sweep: gomaxprocs`) that `make bench` prints between its
// main run and its run of P2 at GOMAXPROCS 1 and 2: results after it are the sweep's, kept apart
// so that the main table's medians stay those of the main run alone.
const sweepKey = "sweep"

// series names one benchmark at one GOMAXPROCS: the name without the "Benchmark" prefix and the
// GOMAXPROCS suffix (e.g. "UncontendedLockRelease/moby"), and the GOMAXPROCS go test ran it at
// (1 when the name has no suffix).
type series struct {
	name  string
	procs int
}

// values holds the values of each series by unit as go test printed it (e.g. "ns/op").
type values map[series]map[string][]float64

func (vs values) add(k series, unit string, v float64) {
	byUnit := vs[k]
	if byUnit == nil {
		byUnit = map[string][]float64{}
		vs[k] = byUnit
	}
	byUnit[unit] = append(byUnit[unit], v)
}

// samples holds every value read: the main run's, and the GOMAXPROCS sweep's when the input has
// one.
type samples struct {
	main  values
	sweep values
	cpu   string
	// procs is the GOMAXPROCS of the main table: the one the most benchmarks of the main run
	// ran at, the larger on a tie.
	procs int
}

func readSamples(in io.Reader) (*samples, error) {
	s := &samples{main: values{}, sweep: values{}}
	r := benchfmt.NewReader(in, "stdin")
	for r.Scan() {
		res, ok := r.Result().(*benchfmt.Result)
		if !ok {
			continue // unit metadata, or a line that is not a benchmark result
		}
		k, err := seriesOf(res.Name)
		if err != nil {
			return nil, err
		}
		if cpu := strings.TrimSpace(res.GetConfig("cpu")); cpu != "" {
			s.cpu = cpu
		}
		into := s.main
		if res.GetConfig(sweepKey) != "" {
			into = s.sweep
		}
		for _, v := range res.Values {
			unit, val := v.Unit, v.Value
			if v.OrigUnit != "" {
				unit, val = v.OrigUnit, v.OrigValue
			}
			into.add(k, unit, val)
		}
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("reading benchmark results: %w", err)
	}
	if len(s.main) == 0 {
		return nil, fmt.Errorf("no benchmark results in the input")
	}
	s.procs = mainProcs(s.main)
	return s, nil
}

// seriesOf splits a benchmark name into its series.
func seriesOf(n benchfmt.Name) (series, error) {
	base, parts := n.Parts()
	k := series{name: string(base), procs: 1}
	for _, p := range parts {
		if p[0] != '-' {
			k.name += string(p)
			continue
		}
		procs, err := strconv.Atoi(string(p[1:]))
		if err != nil {
			return series{}, fmt.Errorf("benchmark %s: GOMAXPROCS suffix %q: %w", n, p, err)
		}
		k.procs = procs
	}
	return k, nil
}

// mainProcs returns the GOMAXPROCS that the most benchmarks in vs ran at, the larger on a tie.
func mainProcs(vs values) int {
	names := map[int]int{}
	for k := range vs {
		names[k.procs]++
	}
	best := 0
	for procs, n := range names {
		if n > names[best] || n == names[best] && procs > best {
			best = procs
		}
	}
	return best
}

// median returns the median of name's values in unit at the main table's GOMAXPROCS, and how
// many there were.
func (s *samples) median(name, unit string) (float64, int) {
	return medianOf(s.main[series{name, s.procs}][unit])
}

// medianAt returns the median of name's values in unit at GOMAXPROCS procs, and how many there
// were: from the sweep when the input has one, else from the main run.
func (s *samples) medianAt(name string, procs int, unit string) (float64, int) {
	vs := s.main
	if len(s.sweep) > 0 {
		vs = s.sweep
	}
	return medianOf(vs[series{name, procs}][unit])
}

func medianOf(vs []float64) (float64, int) {
	vs = slices.Clone(vs)
	if len(vs) == 0 {
		return 0, 0
	}
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2], n
	}
	return (vs[n/2-1] + vs[n/2]) / 2, n
}

// runs returns the largest number of runs any benchmark of the main table has.
func (s *samples) runs() int {
	most := 0
	for k, byUnit := range s.main {
		if k.procs != s.procs {
			continue
		}
		for _, vs := range byUnit {
			most = max(most, len(vs))
		}
	}
	return most
}
