package locktable

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The benchmarks of a key lock among ranges (rangeset.go); the bounds of its cost, in steps, are
// rangeset_steps_internal_test.go's.

// BenchmarkSharedKeyUnderSharedRanges is a shared Lock+Release of one key under R shared ranges
// that all cover it (and R exclusive ones beside it).
func BenchmarkSharedKeyUnderSharedRanges(b *testing.B) {
	for _, r := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("R=%d", r), func(b *testing.B) {
			l := newTestLocker(b, newTestTable(b), NewManualClock(time.Unix(1, 0)))
			var held []*Claim
			for i := range r {
				h, err := l.TryLockRange("k", fmt.Sprintf("l%05d", i), testOptions{Shared: true})
				require.NoError(b, err)
				beside, err := l.TryLockRange(fmt.Sprintf("x%05d", i), fmt.Sprintf("x%05d\x00", i), testOptions{})
				require.NoError(b, err)
				held = append(held, h, beside)
			}
			b.ReportAllocs()
			for b.Loop() {
				h, err := l.TryLock([]byte("k"), testOptions{Shared: true})
				if err != nil {
					b.Fatal(err)
				}
				h.Release()
			}
			for _, h := range held {
				h.Release()
			}
		})
	}
}

// BenchmarkKeyLockBesideQueuedRanges is a shared Lock+Release of a key under one queued shared
// range, with Q range requests queued over other keys.
func BenchmarkKeyLockBesideQueuedRanges(b *testing.B) {
	for _, q := range []int{50, 500, 2000} {
		b.Run(fmt.Sprintf("Q=%d", q), func(b *testing.B) {
			l := newTestLocker(b, newTestTable(b), NewManualClock(time.Unix(1, 0)))
			var held []*Claim
			var queued []<-chan lockResult
			for i := range q {
				k := fmt.Sprintf("q%05d", i)
				h, err := l.TryLock([]byte(k), testOptions{})
				require.NoError(b, err)
				held = append(held, h)
				queued = append(queued, rangeAsync(l, k, k+"\x00", testOptions{Shared: true}, nil))
			}
			blocker, err := l.TryLock([]byte("k0"), testOptions{})
			require.NoError(b, err)
			held = append(held, blocker)
			queued = append(queued, rangeAsync(l, "k", "l", testOptions{Shared: true}, nil))
			require.Eventually(b, func() bool { return l.tab.QueuedRanges(0) == q+1 }, 10*time.Second, time.Millisecond)
			b.ReportAllocs()
			for b.Loop() {
				h, err := l.TryLock([]byte("k5"), testOptions{Shared: true})
				if err != nil {
					b.Fatal(err)
				}
				h.Release()
			}
			for _, h := range held {
				h.Release()
			}
			for _, ch := range queued {
				if res := <-ch; res.err == nil {
					res.h.Release()
				}
			}
		})
	}
}
