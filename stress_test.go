package recordlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// liveSet is every handle issued for one key that was not yet seen expired.
type liveSet struct {
	mu sync.Mutex
	hs []*recordlock.Handle
}

// check verifies the invariant on one key: at most one handle for which IsExpired is false.
// Reading the handles one after another is no snapshot, so it reads the live ones twice: a
// handle that is still live on the second pass was live throughout both passes (expiry is
// permanent), so two of them were authorized at the same instant. It drops handles seen expired.
func (s *liveSet) check(t *testing.T, key int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := s.hs[:0]
	for _, h := range s.hs {
		if !h.IsExpired() {
			live = append(live, h)
		}
	}
	clear(s.hs[len(live):])
	s.hs = live
	still := 0
	for _, h := range live {
		if !h.IsExpired() {
			still++
		}
	}
	if still > 1 {
		t.Errorf("key %d: %d handles authorize writes at once", key, still)
	}
}

func (s *liveSet) add(h *recordlock.Handle) {
	s.mu.Lock()
	s.hs = append(s.hs, h)
	s.mu.Unlock()
}

// 32 goroutines on 8 keys through two Lockers of one database, on the real clock with the
// shortest lease; one hold in 25 stalls past the lease and never calls anything until it is over.
// Invariants, checked after every acquisition and continuously by a checker: at most one handle
// per key for which IsExpired is false, and no holder acquires while an earlier holder's fenced
// commit runs.
func TestStressAtMostOneAuthorizedHolderPerKey(t *testing.T) {
	const (
		goroutines = 32
		nkeys      = 8
		lease      = recordlock.MinLease
	)
	run := time.Duration(stressCount(1500, 30_000)) * time.Millisecond
	db := openDB(t)
	lockers := []*recordlock.Locker{newLocker(t, db), newLocker(t, db)}
	keys := make([][]byte, nkeys)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "stress-%d", i)
	}
	var sets [nkeys]liveSet
	var fencing [nkeys]atomic.Int32 // fenced commits running per key
	var acquired, released, expired, stalls, timeouts, checks, commits atomic.Int64

	ctx, cancel := context.WithTimeout(context.Background(), run) // real time is what is under test
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			for k := range sets {
				sets[k].check(t, k)
				checks.Add(1)
			}
			time.Sleep(50 * time.Microsecond) // leave the CPU to the workers now and then
		}
	})
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			l := lockers[g%len(lockers)]
			for ctx.Err() == nil {
				k := rng.IntN(nkeys)
				h, err := l.Lock(ctx, keys[k], recordlock.Options{Lease: lease, Timeout: time.Second})
				switch {
				case err == nil:
				case ctx.Err() != nil:
					assert.ErrorIs(t, err, ctx.Err())
					return
				default:
					assert.ErrorIs(t, err, recordlock.ErrTimeout)
					timeouts.Add(1)
					continue
				}
				acquired.Add(1)
				if n := fencing[k].Load(); n != 0 {
					t.Errorf("key %d: acquired while %d fenced commits of an earlier holder ran", k, n)
				}
				sets[k].add(h)
				sets[k].check(t, k)
				checks.Add(1)

				if rng.IntN(25) == 0 {
					stalls.Add(1)
					select { // stalled: only the lease timer can end it, nothing here calls the handle
					case <-h.Done():
					case <-time.After(10 * time.Second):
						t.Errorf("key %d: the lease timer never ended a stalled holder", k)
						return
					}
					assert.True(t, h.IsLeaseExpired())
					assert.False(t, h.Release(), "a stalled holder's Release after its lease")
					expired.Add(1)
					continue
				}
				hold := time.Duration(rng.IntN(500)) * time.Microsecond
				sleep := rng.IntN(2) == 0
				err = h.Fence(func() error {
					if n := fencing[k].Add(1); n != 1 {
						t.Errorf("key %d: %d fenced commits at once", k, n)
					}
					if sleep {
						time.Sleep(hold)
					}
					fencing[k].Add(-1)
					return nil
				})
				if err == nil {
					commits.Add(1)
				} else {
					assert.ErrorIs(t, err, recordlock.ErrLeaseExpired)
				}
				if h.Release() {
					released.Add(1)
				} else {
					assert.True(t, h.IsLeaseExpired(), "Release false on a live lease")
					expired.Add(1)
				}
			}
		})
	}
	wg.Wait()

	t.Logf("%d acquisitions: %d released, %d expired (%d of them stalled past the lease); %d fenced commits; %d waits timed out; invariant checked %d times",
		acquired.Load(), released.Load(), expired.Load(), stalls.Load(), commits.Load(), timeouts.Load(), checks.Load())
	assert.Positive(t, stalls.Load())
	assert.Equal(t, acquired.Load(), released.Load()+expired.Load())
	for k := range sets {
		sets[k].check(t, k)
	}
	for _, l := range lockers {
		assert.Eventually(t, func() bool { return recordlock.ProbeTableEmpty(l) }, time.Second, time.Millisecond)
	}
}

// TestMillionRandomOps runs 1,000,000 random operations from four goroutines over 64 keys and two
// Lockers on a shared ManualClock: TryLock, Lock with a short real deadline, Release,
// RevokeLease, Fence, the predicates, Advance and StepWall. Invariant: no two fenced commits of
// one key ever overlap. At the end, once every handle is released, the table is empty, no
// deadline is scheduled, no timer is armed and no goroutine is left.
func TestMillionRandomOps(t *testing.T) {
	const (
		workers = 4
		total   = 1_000_000
		keys    = 64
	)
	base := runtime.NumGoroutine()
	db := openDB(t)
	clk := recordlock.NewManualClock(epoch)
	lockers := [2]*recordlock.Locker{
		newLocker(t, db, recordlock.WithClock(clk), recordlock.WithLogger(quiet)),
		newLocker(t, db, recordlock.WithClock(clk), recordlock.WithLogger(quiet)),
	}
	keyBytes := make([][]byte, keys)
	for i := range keyBytes {
		keyBytes[i] = fmt.Appendf(nil, "rand-%02d", i)
	}
	var inFence [keys]atomic.Int32
	var overlaps, fenced, acquired atomic.Int64
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			type held struct {
				h *recordlock.Handle
				k int
			}
			var mine []held
			for range total / workers {
				l := lockers[r.IntN(2)]
				k := r.IntN(keys)
				opts := recordlock.Options{Scope: recordlock.ScopeNode, Lease: recordlock.MinLease, Timeout: recordlock.MinTimeout}
				switch p := r.IntN(100); {
				case p < 30 && len(mine) < 4:
					if h, err := l.TryLock(keyBytes[k], opts); err == nil {
						mine = append(mine, held{h, k})
						acquired.Add(1)
					} else if !errors.Is(err, recordlock.ErrLocked) {
						t.Errorf("TryLock: %v", err)
						return
					}
				case p < 31 && len(mine) < 4:
					ctx, cancel := context.WithTimeout(context.Background(), 50*time.Microsecond)
					h, err := l.Lock(ctx, keyBytes[k], opts)
					cancel()
					if err == nil {
						mine = append(mine, held{h, k})
						acquired.Add(1)
					} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, recordlock.ErrTimeout) {
						t.Errorf("Lock: %v", err)
						return
					}
				case p < 55 && len(mine) > 0:
					i := r.IntN(len(mine))
					mine[i].h.Release()
					mine = append(mine[:i], mine[i+1:]...)
				case p < 60 && len(mine) > 0:
					mine[r.IntN(len(mine))].h.RevokeLease()
				case p < 80 && len(mine) > 0:
					m := mine[r.IntN(len(mine))]
					_ = m.h.Fence(func() error {
						if !inFence[m.k].CompareAndSwap(0, 1) {
							overlaps.Add(1)
							return nil
						}
						fenced.Add(1)
						inFence[m.k].Store(0)
						return nil
					})
				case p < 90 && len(mine) > 0:
					m := mine[r.IntN(len(mine))]
					_ = m.h.IsExpired()
					_ = m.h.IsLeaseExpired()
				case p < 97:
					clk.Advance(time.Duration(r.IntN(2000)) * time.Microsecond)
				default:
					clk.StepWall(time.Duration(r.IntN(7200)-3600) * time.Second)
				}
			}
			for _, m := range mine {
				m.h.Release()
			}
		})
	}
	wg.Wait()
	assert.Zero(t, overlaps.Load(), "two fenced commits of one key overlapped")
	require.Positive(t, fenced.Load())
	t.Logf("%d operations: %d acquisitions, %d fenced commits, none overlapping", total, acquired.Load(), fenced.Load())
	assert.True(t, recordlock.ProbeTableEmpty(lockers[0]), "the table is empty")
	assert.Zero(t, recordlock.ProbeDeadlines(lockers[0]), "no deadline is scheduled")
	assert.LessOrEqual(t, recordlock.ProbeTimers(clk), keys, "at most one idle timer per shard in use")
	clk.Advance(recordlock.MaxLease)
	assert.Zero(t, recordlock.ProbeTimers(clk), "a timer was re-armed on an idle table")
	testutil.SettleGoroutines(t, base)
}
