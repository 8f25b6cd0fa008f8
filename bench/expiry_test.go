package bench

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/recordlock/recordlock"
)

const (
	// nLapsing is how many leases BenchmarkLapsingLeases lets lapse together, each with a waiter.
	nLapsing = 100_000
	// lapseLease is their lease: short, so that the run is short, and long enough that all
	// 100,000 waiters are queued before the first deadline on a busy 2-core machine, where 1 s
	// is not always enough (lapseRound fails the run if it was not).
	lapseLease = 2 * time.Second
)

// BenchmarkLapsingLeases (P6) takes 100,000 keys with a short lease on the system clock, queues a
// waiter on each, and lets every lease lapse without a release: the per-shard timers must hand
// each key to its waiter. It reports the delay from each key's deadline (ExpiresAt) to its
// waiter's Lock returning: the maximum and the 99th percentile. One op is one such round.
// Target: max delay ≤ 1 s.
func BenchmarkLapsingLeases(b *testing.B) {
	b.Run("recordlock", func(b *testing.B) {
		l := newLocker(b)
		b.ReportAllocs()
		var delays []time.Duration
		for range b.N {
			delays = append(delays, lapseRound(b, l)...)
		}
		slices.Sort(delays)
		b.ReportMetric(ms(delays[len(delays)-1]), "ms-max-delay")
		b.ReportMetric(ms(delays[len(delays)*99/100]), "ms-p99-delay")
	})
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// lapseRound runs one round of BenchmarkLapsingLeases and returns each waiter's delay past its key's deadline.
func lapseRound(b *testing.B, l *recordlock.Locker) []time.Duration {
	ctx := context.Background()
	holdOpts := recordlock.Options{Lease: lapseLease, Scope: recordlock.ScopeNode}
	waitOpts := recordlock.Options{Timeout: 30 * time.Second, Scope: recordlock.ScopeNode}
	deadlines := make([]time.Time, nLapsing)
	entered := make([]time.Time, nLapsing)
	granted := make([]time.Time, nLapsing)
	// The waiters are started first and held at a gate, so that starting 100,000 goroutines
	// does not eat into the lease.
	var wg sync.WaitGroup
	gate := make(chan struct{})
	errs := make(chan error, 1)
	for i := range nLapsing {
		wg.Go(func() {
			key := recordKey(nil, i)
			<-gate
			entered[i] = time.Now()
			h, err := l.Lock(ctx, key, waitOpts)
			granted[i] = time.Now()
			if err != nil {
				select {
				case errs <- err:
				default:
				}
				return
			}
			h.Release()
		})
	}
	for i := range nLapsing {
		h, err := l.Lock(ctx, recordKey(nil, i), holdOpts)
		if err != nil {
			b.Fatal(err)
		}
		deadlines[i] = h.ExpiresAt()
	}
	close(gate)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	first := slices.MinFunc(deadlines, time.Time.Compare)
	last := slices.MaxFunc(entered, time.Time.Compare)
	if !last.Before(first) {
		b.Fatalf("a waiter arrived %v after the first deadline: raise lapseLease", last.Sub(first))
	}
	b.ReportMetric(ms(first.Sub(last)), "ms-margin")
	delays := make([]time.Duration, nLapsing)
	for i := range delays {
		delays[i] = granted[i].Sub(deadlines[i])
	}
	return delays
}
