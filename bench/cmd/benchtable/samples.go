package main

import (
	"fmt"
	"io"
	"slices"

	"golang.org/x/perf/benchfmt"
)

// samples holds every value read, by benchmark name (without the "Benchmark" prefix and the
// GOMAXPROCS suffix, e.g. "UncontendedLockRelease/moby") and by unit as go test printed it (e.g. "ns/op").
type samples struct {
	values map[string]map[string][]float64
	cpu    string
	procs  string
}

func readSamples(in io.Reader) (*samples, error) {
	s := &samples{values: map[string]map[string][]float64{}}
	r := benchfmt.NewReader(in, "stdin")
	for r.Scan() {
		res, ok := r.Result().(*benchfmt.Result)
		if !ok {
			continue // unit metadata, or a line that is not a benchmark result
		}
		base, parts := res.Name.Parts()
		name := string(base)
		for _, p := range parts {
			if p[0] == '-' {
				s.procs = string(p[1:])
				continue
			}
			name += string(p)
		}
		if cpu := res.GetConfig("cpu"); cpu != "" {
			s.cpu = cpu
		}
		byUnit := s.values[name]
		if byUnit == nil {
			byUnit = map[string][]float64{}
			s.values[name] = byUnit
		}
		for _, v := range res.Values {
			unit, val := v.Unit, v.Value
			if v.OrigUnit != "" {
				unit, val = v.OrigUnit, v.OrigValue
			}
			byUnit[unit] = append(byUnit[unit], val)
		}
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("reading benchmark results: %w", err)
	}
	if len(s.values) == 0 {
		return nil, fmt.Errorf("no benchmark results in the input")
	}
	return s, nil
}

// median returns the median of name's values in unit, and how many there were.
func (s *samples) median(name, unit string) (float64, int) {
	vs := slices.Clone(s.values[name][unit])
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

// runs returns the largest number of runs any benchmark has.
func (s *samples) runs() int {
	most := 0
	for _, byUnit := range s.values {
		for _, vs := range byUnit {
			most = max(most, len(vs))
		}
	}
	return most
}
