package locktable

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// exclusionOracle counts, per key of a small key space, the locks granted over it: a shared one
// adds 1, an exclusive one exclusiveWeight. A grant that makes a key's count show an exclusive
// lock beside any other lock breaks exclusion, and the oracle names the key at once.
type exclusionOracle struct {
	keys []atomic.Int64
}

const exclusiveWeight = 1 << 32

func (o *exclusionOracle) granted(t *testing.T, from, to int, shared bool, what string) {
	w := int64(exclusiveWeight)
	if shared {
		w = 1
	}
	for k := from; k < to; k++ {
		n := o.keys[k].Add(w)
		if ex := n / exclusiveWeight; ex > 1 || ex == 1 && n%exclusiveWeight > 0 {
			t.Errorf("exclusion broken at key %d by %s: %d exclusive and %d shared locks hold it", k, what, ex, n%exclusiveWeight)
		}
	}
}

func (o *exclusionOracle) released(from, to int, shared bool) {
	w := int64(exclusiveWeight)
	if shared {
		w = 1
	}
	for k := from; k < to; k++ {
		o.keys[k].Add(-w)
	}
}

// Goroutines lock keys and ranges of a small key space at random, shared and exclusive, waiting or
// not, while others lock and release keys outside it, which grows and shrinks the key shards'
// indexes under the ranges' bringing in. Every grant is checked against the exclusion oracle, and
// the table must be empty once everyone let go: no key lost in the home shard, no retiring span
// left behind.
func TestStressKeysAndRangesExclude(t *testing.T) {
	const keys, workers = 40, 8
	ops := stressCount(1_500, 20_000)
	tab := newTestTable(t)
	l := newTestLocker(t, tab, NewManualClock(time.Unix(1, 0)))
	key := func(i int) []byte { return []byte(fmt.Sprintf("k%02d", i)) }
	oracle := &exclusionOracle{keys: make([]atomic.Int64, keys)}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for c := range 2 {
		wg.Add(1)
		go func() { // churn outside the key space
			defer wg.Done()
			var held []*Claim
			for i := 0; ; i++ {
				select {
				case <-stop:
					for _, h := range held {
						h.Release()
					}
					return
				default:
				}
				if h, err := l.TryLock([]byte(fmt.Sprintf("churn/%d/%05d", c, i%4096)), testOptions{}); err == nil {
					held = append(held, h)
				}
				if len(held) > 2000 || i%3000 == 2999 {
					for _, h := range held {
						h.Release()
					}
					held = held[:0]
				}
			}
		}()
	}
	var done sync.WaitGroup
	for g := range workers {
		done.Add(1)
		go func() {
			defer done.Done()
			rnd := rand.New(rand.NewPCG(uint64(g), 7))
			for range ops {
				from := rnd.IntN(keys)
				to := from + 1
				isRange := rnd.IntN(3) == 0
				if isRange {
					to = from + 1 + rnd.IntN(min(8, keys-from))
				}
				o := testOptions{Shared: rnd.IntN(2) == 0}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rnd.IntN(3))*time.Millisecond)
				wait := rnd.IntN(2) == 0
				var h *Claim
				var err error
				if isRange {
					h, err = l.acquireRange(ctx, key(from), key(to), o, nil, wait)
				} else {
					h, err = l.acquire(ctx, key(from), o, nil, wait)
				}
				cancel()
				if err != nil {
					continue
				}
				what := fmt.Sprintf("[%d, %d) shared=%v", from, to, o.Shared)
				oracle.granted(t, from, to, o.Shared, what)
				if rnd.IntN(4) == 0 {
					time.Sleep(time.Duration(rnd.IntN(50)) * time.Microsecond)
				}
				oracle.released(from, to, o.Shared)
				require.True(t, h.Release())
			}
		}()
	}
	done.Wait()
	close(stop)
	wg.Wait()
	if sp := tab.spaceOf(0); sp != nil {
		require.True(t, sp.cover.Load().retiring.Empty(), "a retiring span outlived its keys")
		require.True(t, sp.cover.Load().live.Empty(), "a live span outlived its range")
	}
	require.True(t, ProbeTableEmpty(l))
}
