package bench

import (
	"slices"
	"testing"
	"time"
)

// reportThroughput reports the b.N ops done in elapsed as unit (ops per second), and the p50 and
// p99 of the latencies each worker recorded, in microseconds with their fraction (an op can take
// less than one).
func reportThroughput(b *testing.B, unit string, elapsed time.Duration, lat [][]time.Duration) {
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), unit)
	b.ReportMetric(us(percentile(all, 50)), "us-p50")
	b.ReportMetric(us(percentile(all, 99)), "us-p99")
}

// percentile returns the p-th percentile of sorted, 0 when it is empty.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

// us is d in microseconds, with its fraction.
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
