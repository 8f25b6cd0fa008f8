package recordlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// Shared locks through the Locker (docs/DESIGN.md §15): modes, fair queueing, per-sharer leases.

// Shared handles of one key coexist, from one Locker or several; an exclusive request is refused
// until the last of them is gone; each reports its mode.
func TestSharedHoldersCoexist(t *testing.T) {
	db := openDB(t)
	clk, a := manual(t, db)
	b := newLocker(t, db, recordlock.WithClock(clk))
	key := []byte("price")

	var hs []*recordlock.Handle
	for _, l := range []*recordlock.Locker{a, b, a} {
		h, err := l.TryLock(key, shared)
		require.NoError(t, err)
		assert.True(t, h.Shared())
		hs = append(hs, h)
	}
	h, err := a.Lock(context.Background(), key, shared)
	require.NoError(t, err, "Lock of a key held shared, with nobody queued, is granted at once")
	hs = append(hs, h)
	assert.Equal(t, 4, a.Stats().Held, "Held counts holders, not keys")

	for i, h := range hs {
		_, err := b.TryLock(key, recordlock.Options{})
		require.ErrorIs(t, err, recordlock.ErrLocked, "with %d sharers left", len(hs)-i)
		require.True(t, h.Release())
		assert.True(t, h.IsExpired())
		for _, other := range hs[i+1:] {
			assert.False(t, other.IsExpired(), "a release gives back only its own share")
		}
	}
	x, err := b.TryLock(key, recordlock.Options{})
	require.NoError(t, err, "free once the last sharer is gone")
	assert.False(t, x.Shared())
	_, err = a.TryLock(key, shared)
	require.ErrorIs(t, err, recordlock.ErrLocked, "an exclusive holder excludes sharers")
	require.True(t, x.Release())
	assert.True(t, recordlock.ProbeTableEmpty(a))
}

// Each sharer mints its own AcquiredAt and has its own lease; the Options cache tells Shared
// apart, so alternating modes on one Locker gets each call the mode it asked for.
func TestSharedHandlesAreIndependent(t *testing.T) {
	clk, l := manual(t, openDB(t))
	key := []byte("k")
	h1, err := l.TryLock(key, recordlock.Options{Shared: true, Lease: time.Second})
	require.NoError(t, err)
	clk.Advance(time.Millisecond)
	h2, err := l.TryLock(key, recordlock.Options{Shared: true, Lease: 2 * time.Second})
	require.NoError(t, err)
	assert.Less(t, h1.AcquiredAt(), h2.AcquiredAt())
	assert.Equal(t, epoch.Add(time.Second).UnixNano(), h1.ExpiresAt().UnixNano())
	assert.Equal(t, epoch.Add(time.Millisecond+2*time.Second).UnixNano(), h2.ExpiresAt().UnixNano())
	require.True(t, h1.Release())
	require.True(t, h2.Release())

	for i := range 6 {
		h, err := l.TryLock(key, recordlock.Options{Shared: i%2 == 0})
		require.NoError(t, err)
		assert.Equal(t, i%2 == 0, h.Shared(), "call %d", i)
		require.True(t, h.Release())
	}
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A shared request that arrives while anything is queued queues behind it, so readers never
// starve a writer; TryLock of such a request fails.
func TestSharedRequestQueuesBehindWriter(t *testing.T) {
	clk, l := manual(t, openDB(t))
	key := []byte("k")
	r1, err := l.TryLock(key, shared)
	require.NoError(t, err)
	w := lockAsync(context.Background(), l, key, wait)
	waitQueued(t, l, key, 1)

	_, err = l.TryLock(key, shared)
	require.ErrorIs(t, err, recordlock.ErrLocked, "a writer is queued: the reader may not pass it")
	r2 := lockAsync(context.Background(), l, key, sharedWait)
	waitQueued(t, l, key, 2)

	clk.Advance(time.Millisecond) // the writer has waited 1 ms: the release hands it the key
	require.True(t, r1.Release())
	wr := testutil.Await(t, w, "the lock")
	require.NoError(t, wr.err)
	assert.False(t, wr.h.Shared())
	assert.True(t, pendingLock(r2), "the reader waits for the writer")
	require.True(t, wr.h.Release())
	rr := testutil.Await(t, r2, "the lock")
	require.NoError(t, rr.err)
	assert.True(t, rr.h.Shared())
	require.True(t, rr.h.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// A release grants the shared requests at the head of the queue together, up to the next
// exclusive one, and wakes nobody else; they hold the key before Release returns (no newcomer can
// take it), and the writer behind them gets it when the last of them is gone.
func TestReleaseGrantsSharedRunTogether(t *testing.T) {
	clk, l := manual(t, openDB(t))
	key := []byte("k")
	holder, err := l.TryLock(key, recordlock.Options{})
	require.NoError(t, err)
	s1 := lockAsync(context.Background(), l, key, sharedWait)
	waitQueued(t, l, key, 1)
	s2 := lockAsync(context.Background(), l, key, sharedWait)
	waitQueued(t, l, key, 2)
	x := lockAsync(context.Background(), l, key, wait)
	waitQueued(t, l, key, 3)
	s3 := lockAsync(context.Background(), l, key, sharedWait)
	waitQueued(t, l, key, 4)

	require.True(t, holder.Release()) // the head has waited less than 1 ms: shared heads are granted all the same
	assert.Equal(t, 2, recordlock.ProbeQueuedWaiters(l, key), "both readers left the queue with the key")
	assert.Equal(t, 0, recordlock.ProbeWokenWaiters(l, key), "the writer behind them was not woken")
	_, err = l.TryLock(key, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked)
	g1, g2 := testutil.Await(t, s1, "the lock"), testutil.Await(t, s2, "the lock")
	require.NoError(t, g1.err)
	require.NoError(t, g2.err)
	assert.Equal(t, 2, l.Stats().Held)
	assert.True(t, pendingLock(x))
	assert.True(t, pendingLock(s3), "the reader behind the writer waits for it")

	clk.Advance(time.Millisecond)
	require.True(t, g1.h.Release())
	assert.Equal(t, 2, recordlock.ProbeQueuedWaiters(l, key), "one share is left: the writer still waits")
	assert.Equal(t, 0, recordlock.ProbeWokenWaiters(l, key), "a release wakes only what it grants")
	require.True(t, g2.h.Release())
	xr := testutil.Await(t, x, "the lock")
	require.NoError(t, xr.err)
	assert.True(t, pendingLock(s3))
	require.True(t, xr.h.Release())
	require.True(t, granted(t, s3, "the lock").Release())
	st := l.Stats()
	assert.Equal(t, uint64(4), st.Contended)
	assert.Equal(t, 0, st.Waiting)
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// The 1 ms barging allowance applies only to an exclusive waiter woken for a free key: a shared
// newcomer never takes a key from a woken writer.
func TestSharedNewcomerDoesNotBarge(t *testing.T) {
	_, l := manual(t, openDB(t))
	key := []byte("k")
	holder, err := l.TryLock(key, recordlock.Options{})
	require.NoError(t, err)
	x := lockAsync(context.Background(), l, key, wait)
	waitQueued(t, l, key, 1)
	require.True(t, holder.Release()) // within 1 ms: the writer is woken, not handed the key
	_, err = l.TryLock(key, shared)
	require.ErrorIs(t, err, recordlock.ErrLocked, "a reader does not pass a queued writer")
	require.True(t, granted(t, x, "the lock").Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// When the writer at the head of the queue gives up, the readers behind it are granted at once
// if the key is held shared.
func TestReadersBehindWriterThatGivesUpAreGranted(t *testing.T) {
	clk, l := manual(t, openDB(t))
	key := []byte("k")
	r0, err := l.TryLock(key, shared)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	x := lockAsync(ctx, l, key, recordlock.Options{Timeout: time.Second})
	waitQueued(t, l, key, 1)
	r1 := lockAsync(context.Background(), l, key, sharedWait)
	waitQueued(t, l, key, 2)
	r2 := lockAsync(context.Background(), l, key, sharedWait)
	waitQueued(t, l, key, 3)

	clk.Advance(time.Second)
	require.ErrorIs(t, testutil.Await(t, x, "the lock").err, recordlock.ErrTimeout)
	for _, c := range []<-chan lockResult{r1, r2} {
		require.True(t, granted(t, c, "the lock").Release())
	}
	require.True(t, r0.Release())
	assert.Equal(t, uint64(1), l.Stats().Timeouts)
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Each sharer's lease runs on its own: the first lapse frees only that share, and a writer
// waiting for the key gets it at the last sharer's deadline, from the timers alone.
func TestSharerLeasesLapseIndependently(t *testing.T) {
	clk, l := manual(t, openDB(t))
	key := []byte("k")
	var hooks [2]hookCounter
	var hs [2]*recordlock.Handle
	for i, lease := range []time.Duration{time.Second, 2 * time.Second} {
		h, err := l.TryLock(key, recordlock.Options{Shared: true, Lease: lease})
		require.NoError(t, err)
		joinHook(t, h, clk, lease, hooks[i].hook)
		hs[i] = h
	}
	done0, done1 := hs[0].Done(), hs[1].Done()
	x := lockAsync(context.Background(), l, key, wait)
	waitQueued(t, l, key, 1)

	clk.Advance(time.Second)
	assert.True(t, testutil.Closed(done0))
	assert.False(t, testutil.Closed(done1), "one sharer's lapse ends only its own authority")
	assert.Equal(t, 1, hooks[0].count())
	assert.Equal(t, 0, hooks[1].count())
	assert.False(t, hs[1].IsExpired())
	assert.Equal(t, 1, recordlock.ProbeQueuedWaiters(l, key), "one share is left")

	clk.Advance(time.Second)
	xr := testutil.Await(t, x, "the lock")
	require.NoError(t, xr.err, "the writer gets the key at the last sharer's deadline")
	assert.True(t, testutil.Closed(done1))
	assert.Equal(t, 1, hooks[1].count())
	assert.Equal(t, uint64(2), l.Stats().Lapsed)
	require.True(t, xr.h.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Revoking one sharer gives back only its share; Release of a revoked sharer returns false.
func TestRevokingOneSharer(t *testing.T) {
	_, l := manual(t, openDB(t))
	key := []byte("k")
	h1, err := l.TryLock(key, shared)
	require.NoError(t, err)
	h2, err := l.TryLock(key, shared)
	require.NoError(t, err)
	h1.RevokeLease()
	assert.True(t, h1.IsLeaseExpired())
	assert.False(t, h2.IsExpired())
	_, err = l.TryLock(key, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked)
	assert.False(t, h1.Release())
	assert.Equal(t, 1, l.Stats().Held)
	require.True(t, h2.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Sharers whose deadlines passed with nothing watching them are settled by the exclusive request
// that finds them: the key is free before any timer runs.
func TestExclusiveRequestSettlesLapsedSharers(t *testing.T) {
	clk, l := manual(t, openDB(t), recordlock.WithLogger(quiet))
	key := []byte("k")
	var hs []*recordlock.Handle
	for range 5 {
		h, err := l.TryLock(key, recordlock.Options{Shared: true, Lease: recordlock.MinLease})
		require.NoError(t, err)
		hs = append(hs, h)
	}
	live, err := l.TryLock(key, recordlock.Options{Shared: true, Lease: time.Second})
	require.NoError(t, err)
	clk.Advance(recordlock.MinLease)
	_, err = l.TryLock(key, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked, "one sharer is still live")
	require.True(t, live.Release())
	x, err := l.TryLock(key, recordlock.Options{})
	require.NoError(t, err, "every lapsed sharer is settled by the request")
	for _, h := range hs {
		assert.True(t, h.IsLeaseExpired())
		assert.False(t, h.Release())
	}
	assert.Equal(t, uint64(5), l.Stats().Lapsed)
	require.True(t, x.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Fence on a shared handle is a fenced read: while its commit runs no writer is admitted, even
// when the lease lapses inside it; the writer gets the key when the commit returns.
func TestFenceOnSharedHandleHoldsOffWriters(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	key := []byte("k")
	dbPut(t, db, "k", "v1")
	r, err := l.TryLock(key, recordlock.Options{Shared: true, Lease: time.Second})
	require.NoError(t, err)
	x := lockAsync(context.Background(), l, key, wait)
	waitQueued(t, l, key, 1)

	var read []byte
	err = r.Fence(func() error {
		clk.Advance(time.Second) // the lease lapses inside the fence
		assert.True(t, r.IsLeaseExpired())
		read = dbGet(t, db, "k")
		assert.True(t, pendingLock(x), "no writer is admitted while the fenced read runs")
		_, err := l.TryLock(key, recordlock.Options{})
		assert.ErrorIs(t, err, recordlock.ErrLocked)
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, "v1", string(read))
	xr := testutil.Await(t, x, "the lock")
	require.NoError(t, xr.err, "the writer gets the key once the fence returns")
	require.ErrorIs(t, r.Fence(func() error { return nil }), recordlock.ErrLeaseExpired)
	require.True(t, xr.h.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Close releases the closing Locker's sharers (their hooks fire) and leaves the other Lockers'
// sharers of the same key holding.
func TestCloseReleasesOnlyItsSharers(t *testing.T) {
	db := openDB(t)
	clk, a := manual(t, db)
	b := newLocker(t, db, recordlock.WithClock(clk))
	key := []byte("k")
	var hook hookCounter
	ha, err := a.TryLock(key, shared)
	require.NoError(t, err)
	joinHook(t, ha, clk, time.Second, hook.hook)
	hb, err := b.TryLock(key, shared)
	require.NoError(t, err)
	ha2, err := a.TryLock(key, shared)
	require.NoError(t, err)

	require.NoError(t, a.Close())
	assert.True(t, ha.IsExpired())
	assert.True(t, ha2.IsExpired())
	assert.Equal(t, 1, hook.count())
	assert.False(t, hb.IsExpired())
	assert.Equal(t, 1, b.Stats().Held)
	_, err = b.TryLock(key, recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrLocked)
	require.True(t, hb.Release())
	assert.True(t, recordlock.ProbeTableEmpty(b))
}

// Locks yields one LockInfo per holder: a key held by three sharers appears three times, each
// with Shared set and its own lease and AcquiredAt; Waiters counts the requests queued.
func TestLocksListsEverySharer(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	key := []byte("k")
	var hs []*recordlock.Handle
	for i := range 3 {
		h, err := l.TryLock(key, recordlock.Options{Shared: true, Lease: time.Duration(i+1) * time.Second})
		require.NoError(t, err)
		hs = append(hs, h)
		clk.Advance(time.Millisecond)
	}
	x := lockAsync(context.Background(), l, key, wait)
	waitQueued(t, l, key, 1)
	other, err := l.TryLock([]byte("other"), recordlock.Options{})
	require.NoError(t, err)

	infos := map[recordlock.Timestamp]recordlock.LockInfo{}
	for _, info := range collectLocks(l) {
		if string(info.Key) == "k" {
			infos[info.AcquiredAt] = info
		} else {
			assert.False(t, info.Shared)
			assert.Zero(t, info.Waiters)
		}
	}
	require.Len(t, infos, 3)
	for i, h := range hs {
		info, ok := infos[h.AcquiredAt()]
		require.True(t, ok)
		assert.True(t, info.Shared)
		assert.Equal(t, 1, info.Waiters)
		assert.Equal(t, h.ExpiresAt(), info.ExpiresAt)
		assert.Equal(t, time.Duration(i+1)*time.Second-3*time.Millisecond+time.Duration(i)*time.Millisecond, info.Remaining)
	}
	assert.Equal(t, 4, l.Stats().Held)
	for _, h := range hs {
		require.True(t, h.Release())
	}
	require.True(t, granted(t, x, "the lock").Release())
	require.True(t, other.Release())
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Many sharers given back in random order: each release frees exactly its own share, whatever
// its position, and the last one frees the key.
func TestManySharersReleasedInAnyOrder(t *testing.T) {
	_, l := manual(t, openDB(t))
	key := []byte("k")
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		n := 1 + r.IntN(200)
		hs := make([]*recordlock.Handle, n)
		for i := range hs {
			h, err := l.TryLock(key, shared)
			require.NoError(t, err)
			hs[i] = h
		}
		r.Shuffle(n, func(i, j int) { hs[i], hs[j] = hs[j], hs[i] })
		for i, h := range hs {
			require.Equal(t, n-i, l.Stats().Held, "round %d", round)
			require.True(t, h.Release(), "round %d release %d", round, i)
			require.False(t, h.Release())
		}
		require.Zero(t, l.Stats().Held)
		require.True(t, recordlock.ProbeTableEmpty(l), "round %d", round)
	}
}

// Readers and writers on a few keys from many goroutines: at every moment a key has either one
// exclusive holder or only sharers (checked by each holder on entry and exit), and readers
// really do overlap.
func TestSharedExclusionStress(t *testing.T) {
	db := openDB(t)
	lockers := []*recordlock.Locker{newLocker(t, db), newLocker(t, db)}
	const keys, workers, rounds = 3, 8, 300
	type state struct{ readers, writers atomic.Int32 }
	var st [keys]state
	var checked, overlaps, violations atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			l := lockers[w%2]
			for range rounds {
				k := r.IntN(keys)
				sharedMode := r.IntN(4) != 0
				h, err := l.Lock(context.Background(), []byte(fmt.Sprint("k", k)), recordlock.Options{Shared: sharedMode, Timeout: time.Minute})
				if !assert.NoError(t, err) {
					return
				}
				s := &st[k]
				if sharedMode {
					if s.readers.Add(1) > 1 {
						overlaps.Add(1)
					}
					if s.writers.Load() != 0 {
						violations.Add(1)
					}
				} else {
					if s.writers.Add(1) != 1 || s.readers.Load() != 0 {
						violations.Add(1)
					}
				}
				checked.Add(1)
				if r.IntN(3) == 0 {
					time.Sleep(time.Duration(r.IntN(100)) * time.Microsecond)
				}
				if sharedMode {
					s.readers.Add(-1)
				} else {
					s.writers.Add(-1)
				}
				assert.True(t, h.Release())
			}
		})
	}
	wg.Wait()
	t.Logf("%d grants checked, %d with another reader inside", checked.Load(), overlaps.Load())
	assert.Zero(t, violations.Load(), "a writer shared a key with another holder")
	assert.Equal(t, int64(workers*rounds), checked.Load())
	assert.Positive(t, overlaps.Load(), "readers never overlapped")
	assert.True(t, recordlock.ProbeTableEmpty(lockers[0]))
}

// A writer queued behind sharers that nothing else watches gets the key at the last sharer's
// deadline from the timers alone, whether the sharers were granted before it queued or together
// with other readers while it was queued.
func TestWriterGetsKeyAtLastSharersDeadline(t *testing.T) {
	t.Run("sharers granted before the writer queued", func(t *testing.T) {
		clk, l := manual(t, openDB(t))
		key := []byte("k")
		for i := range 3 {
			_, err := l.TryLock(key, recordlock.Options{Shared: true, Lease: time.Duration(i+1) * time.Second})
			require.NoError(t, err)
		}
		x := lockAsync(context.Background(), l, key, wait)
		waitQueued(t, l, key, 1)
		clk.Advance(2 * time.Second)
		assert.True(t, pendingLock(x))
		assert.Equal(t, 1, l.Stats().Held, "the timers settled the first two sharers")
		clk.Advance(time.Second)
		xr := testutil.Await(t, x, "the lock")
		require.NoError(t, xr.err)
		require.True(t, xr.h.Release())
		assert.True(t, recordlock.ProbeTableEmpty(l))
	})
	t.Run("sharers granted together while the writer waited", func(t *testing.T) {
		clk, l := manual(t, openDB(t))
		key := []byte("k")
		holder, err := l.TryLock(key, recordlock.Options{})
		require.NoError(t, err)
		s1 := lockAsync(context.Background(), l, key, recordlock.Options{Shared: true, Timeout: time.Minute, Lease: time.Second})
		waitQueued(t, l, key, 1)
		s2 := lockAsync(context.Background(), l, key, recordlock.Options{Shared: true, Timeout: time.Minute, Lease: 2 * time.Second})
		waitQueued(t, l, key, 2)
		x := lockAsync(context.Background(), l, key, wait)
		waitQueued(t, l, key, 3)
		require.True(t, holder.Release())
		require.NoError(t, testutil.Await(t, s1, "the lock").err)
		require.NoError(t, testutil.Await(t, s2, "the lock").err)
		clk.Advance(time.Second)
		assert.True(t, pendingLock(x))
		clk.Advance(time.Second)
		require.True(t, granted(t, x, "the writer gets the key when the second reader's lease ends").Release())
		assert.True(t, recordlock.ProbeTableEmpty(l))
	})
}

// BenchmarkUncontendedSharedLockRelease is BenchmarkUncontendedLockRelease (P1) with shared locks:
// one goroutine taking and giving back free keys shared.
func BenchmarkUncontendedSharedLockRelease(b *testing.B) {
	l := newLocker(b, openDB(b))
	keys := benchKeys("k", 1<<16)
	opts := benchOpts
	opts.Shared = true
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		h, err := l.Lock(ctx, keys[i&(len(keys)-1)], opts)
		if err != nil {
			b.Fatal(err)
		}
		h.Release()
		i++
	}
}

// With cluster scope, each local sharer takes its share of the local key and then asks the
// coordinator for a round of its own: two sharers' requests are in flight at once, each joins
// its own round, and each round is released with its own share. An exclusive request waits for
// the local key first, so its request never overlaps another of the same key.
func TestClusterSharersEachJoinARound(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	coord := newTestCoord(clk, l.Timestamp)
	coord.gate = make(chan struct{})
	coord.entered = make(chan context.Context, 2)
	l.SetCoordinator(coord)
	key := []byte("k")
	opts := recordlock.Options{Shared: true, Scope: recordlock.ScopeCluster, Timeout: time.Minute}
	first := lockAsync(context.Background(), l, key, opts)
	second := lockAsync(context.Background(), l, key, opts)
	testutil.Await(t, coord.entered, "the first sharer's request")
	testutil.Await(t, coord.entered, "the second sharer's request")
	close(coord.gate)
	var hs []*recordlock.Handle
	for _, c := range []<-chan lockResult{first, second} {
		r := testutil.Await(t, c, "the lock")
		require.NoError(t, r.err)
		assert.True(t, r.h.Shared())
		assert.Equal(t, recordlock.ScopeCluster, r.h.Scope())
		hs = append(hs, r.h)
	}
	assert.Equal(t, 2, coord.maxInFlight, "both sharers asked the coordinator at once")
	assert.NotEqual(t, hs[0].Token(), hs[1].Token(), "each joined a round of its own")

	coord.gate = nil
	x := lockAsync(context.Background(), l, key, recordlock.Options{Scope: recordlock.ScopeCluster, Timeout: time.Minute})
	waitQueued(t, l, key, 1)
	require.True(t, hs[0].Release())
	_, releases := coord.counts()
	assert.Equal(t, 1, releases, "a sharer's release ends its own round")
	require.True(t, hs[1].Release())
	require.True(t, granted(t, x, "the exclusive lock").Release())
	calls, releases := coord.counts()
	assert.Equal(t, 3, calls)
	assert.Equal(t, 3, releases)
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// Resolve carries Shared through, for either value, with every default filled in.
func TestResolveCarriesShared(t *testing.T) {
	for _, s := range []bool{false, true} {
		r, err := recordlock.Options{Shared: s, Scope: recordlock.ScopeNode}.Resolve()
		require.NoError(t, err)
		assert.Equal(t, recordlock.Resolved{Lease: recordlock.DefaultLease, Timeout: recordlock.DefaultTimeout,
			Scope: recordlock.ScopeNode, ScopeRequested: true, Shared: s}, r)
	}
}
