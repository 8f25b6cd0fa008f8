package locktable

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/testutil"
)

// An exclusive request that queues behind a shared key whose sharers have no timer settles every
// lapsed sharer, in whichever place it is, but one inside a Fence, which keeps the key until its
// fence ends; live sharers keep theirs. Each seed draws up to 12 sharers, lapsed or live, their
// places moved by live ones given back and taken again, and sometimes one lapsed sharer in a
// Fence (docs/DESIGN.md §4.3).
func TestQueuedExclusiveSettlesEveryLapsedSharer(t *testing.T) {
	for seed := uint64(0); seed < 300; seed++ {
		ok := t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			tab := newTestTable(t)
			clk := NewManualClock(time.Unix(1e9, 0))
			l := newTestLocker(t, tab, clk)
			key := []byte("k")
			n := 1 + rng.IntN(12)
			var claims []*Claim
			lapses := map[*Claim]bool{}
			anyLive := false
			for range n {
				lapse := rng.IntN(2) == 0
				lease := time.Minute
				if lapse {
					lease = time.Second
				}
				h, err := l.TryLock(key, testOptions{Shared: true, Lease: lease})
				require.NoError(t, err)
				claims = append(claims, h)
				lapses[h] = lapse
				anyLive = anyLive || !lapse
			}
			// A live sharer given back moves the last one into its place; taken again, it is last.
			for range rng.IntN(4) {
				i := rng.IntN(len(claims))
				if lapses[claims[i]] {
					continue
				}
				claims[i].Release()
				h, err := l.TryLock(key, testOptions{Shared: true, Lease: time.Minute})
				require.NoError(t, err)
				claims[i] = h
				lapses[h] = false
			}
			// Sometimes one sharer that lapses is inside a Fence.
			var fenced *Claim
			release := make(chan struct{})
			endFence := sync.OnceFunc(func() { close(release) })
			defer endFence()
			done := make(chan error, 1)
			for _, h := range claims {
				if lapses[h] && rng.IntN(3) == 0 {
					fenced = h
					in := make(chan struct{})
					go func() { done <- fence(h, func() error { close(in); <-release; return nil }) }()
					<-in
					break
				}
			}
			clk.Advance(2 * time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			res := lockAsync(ctx, l, key, testOptions{})
			var r lockResult
			if anyLive || fenced != nil {
				WaitQueued(t, l, key, 1)
			} else {
				r = testutil.Await(t, res, "the grant of a key whose every sharer lapsed")
			}
			for i, h := range claims {
				held := h.flags()&flagHeld != 0
				switch {
				case h == fenced:
					require.True(t, held, "the fenced sharer stays until its fence ends")
					require.NotZero(t, h.flags()&flagExpired)
				case lapses[h]:
					require.False(t, held, "lapsed sharer %d of %d still held once the exclusive request queued", i, n)
				default:
					require.True(t, held, "live sharer %d", i)
				}
			}
			if fenced != nil {
				endFence()
				<-done
			}
			for _, h := range claims {
				if !lapses[h] {
					h.Release()
				}
			}
			if r.h == nil && r.err == nil {
				r = testutil.Await(t, res, "the grant once the sharers are gone")
			}
			require.NoError(t, r.err)
			r.h.Release()
		})
		if !ok {
			break // one seed's failure says it; the others would each wait out the guard
		}
	}
}
