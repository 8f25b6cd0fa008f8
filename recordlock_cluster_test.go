package recordlock_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// With a zero Timeout and a ctx deadline, the cluster round is bounded on the Locker's clock by
// the time left until that deadline when Lock started, not by DefaultTimeout.
func TestClusterRoundBoundedByCtxDeadline(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	c := newTestCoord(clk, l.Timestamp)
	c.gate, c.entered = make(chan struct{}), make(chan context.Context, 1)
	l.SetCoordinator(c)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	got := lockAsync(ctx, l, []byte("k"), recordlock.Options{Scope: recordlock.ScopeCluster, Lease: time.Minute})
	actx := <-c.entered // the round's budget is armed before Acquire is called

	clk.Advance(recordlock.DefaultTimeout + time.Second)
	require.NoError(t, actx.Err(), "the round is still asked for past DefaultTimeout")
	clk.Advance(15 * time.Second) // 46 s: past the ctx deadline's 45 s, on the Locker's clock
	r := testutil.Await(t, got, "Lock")
	require.ErrorIs(t, r.err, recordlock.ErrTimeout)
	assert.Nil(t, r.h)
	requireFree(t, l, "k")
}

// The local key is taken before the coordinator is asked and kept while it answers, so one node
// never asks the cluster twice for one key at once.
func TestClusterLockTakesLocalKeyFirst(t *testing.T) {
	t.Run("held while Acquire runs, even past the lease", func(t *testing.T) {
		_, clk, l, other := lockerPair(t)
		c := newTestCoord(clk, l.Timestamp)
		c.gate, c.entered = make(chan struct{}), make(chan context.Context, 1)
		l.SetCoordinator(c)

		type result struct {
			h   *recordlock.Handle
			err error
		}
		res := make(chan result, 1)
		go func() {
			h, err := l.Lock(context.Background(), []byte("k"),
				recordlock.Options{Scope: recordlock.ScopeCluster, Lease: time.Second, Timeout: time.Minute})
			res <- result{h, err}
		}()
		<-c.entered
		_, err := other.TryLock([]byte("k"), recordlock.Options{Scope: recordlock.ScopeNode})
		require.ErrorIs(t, err, recordlock.ErrLocked, "the local key is held while Acquire runs")

		// The cluster answers slowly: longer than the lease, within the wait. The local key
		// must not lapse meanwhile, or a second Lock on this node would ask the cluster too.
		clk.Advance(2 * time.Second)
		_, err = other.TryLock([]byte("k"), recordlock.Options{Scope: recordlock.ScopeNode})
		require.ErrorIs(t, err, recordlock.ErrLocked, "the local key outlasts a slow Acquire")

		close(c.gate)
		r := <-res
		require.NoError(t, r.err)
		assert.Equal(t, recordlock.ScopeCluster, r.h.Scope())
		_, err = other.TryLock([]byte("k"), recordlock.Options{Scope: recordlock.ScopeNode})
		require.ErrorIs(t, err, recordlock.ErrLocked)
		require.True(t, r.h.Release())
		requireFree(t, other, "k")
	})

	t.Run("concurrent cluster locks of one key ask one at a time", func(t *testing.T) {
		// Invariant: at most one Acquire per key in flight on this node.
		db := openDB(t)
		lockers := []*recordlock.Locker{newLocker(t, db), newLocker(t, db)}
		c := newTestCoord(recordlock.SystemClock(), lockers[0].Timestamp)
		c.yield = true
		lockers[0].SetCoordinator(c)
		const goroutines, rounds = 8, 40
		keys := []string{"a", "b"}
		var granted atomic.Int64
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				l := lockers[g%len(lockers)]
				for i := range rounds {
					h, err := l.Lock(context.Background(), []byte(keys[i%len(keys)]),
						recordlock.Options{Scope: recordlock.ScopeCluster, Timeout: time.Minute})
					if !assert.NoError(t, err) {
						return
					}
					granted.Add(1)
					assert.True(t, h.Release())
				}
			})
		}
		wg.Wait()
		calls, releases := c.counts()
		assert.Equal(t, goroutines*rounds, int(granted.Load()))
		assert.Equal(t, goroutines*rounds, calls)
		assert.Equal(t, goroutines*rounds, releases)
		assert.Equal(t, 1, c.maxInFlight, "Acquire calls in flight at once for one key")
	})
}

// Acquire gets what is left of Options.Timeout after the local wait, as a ctx that the Locker
// cancels on its own clock; running out of it is ErrTimeout and gives the local key back.
func TestClusterLockPassesRemainingWait(t *testing.T) {
	db := openDB(t)
	clk := notifyClock{recordlock.NewManualClock(epoch), make(chan time.Duration, 8)}
	l := newLocker(t, db, recordlock.WithClock(clk))
	c := newTestCoord(clk, l.Timestamp)
	c.entered = make(chan context.Context, 1)
	c.gate = make(chan struct{}) // never opened: Acquire waits for its ctx
	l.SetCoordinator(c)

	h0, err := l.Lock(context.Background(), []byte("k"), recordlock.Options{Scope: recordlock.ScopeNode, Lease: time.Minute})
	require.NoError(t, err) // nobody watches h0's lease yet: no timer

	errc := make(chan error, 1)
	go func() {
		_, err := l.Lock(context.Background(), []byte("k"),
			recordlock.Options{Scope: recordlock.ScopeCluster, Timeout: 10 * time.Second})
		errc <- err
	}()
	require.Equal(t, 10*time.Second, <-clk.armed, "the Lock queued with its full timeout")
	clk.Advance(4 * time.Second)
	require.True(t, h0.Release())
	ctx := <-c.entered
	for got := time.Duration(0); got != 6*time.Second; { // the budget, after timers re-armed by the handoff
		got = testutil.Await(t, clk.armed, "the 6s budget armed for Acquire's remaining wait")
	}

	clk.Advance(6*time.Second - time.Nanosecond)
	require.NoError(t, ctx.Err(), "the budget has not run out yet")
	_, hasDeadline := ctx.Deadline()
	assert.False(t, hasDeadline, "the budget runs on the Locker's clock, not a wall deadline")
	clk.Advance(time.Nanosecond)
	require.Error(t, ctx.Err(), "the budget ends at the original Timeout")
	require.ErrorIs(t, <-errc, recordlock.ErrTimeout)
	requireFree(t, l, "k")
}

// Every way a cluster round can fail gives the local key back, with the error the caller expects.
func TestClusterLockFailureGivesLocalKeyBack(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name         string
		arrange      func(c *testCoord, clk *recordlock.ManualClock, cancel context.CancelFunc)
		try          bool
		want         []error
		wantReleases int
	}{
		{
			name:    "coordinator error",
			arrange: func(c *testCoord, _ *recordlock.ManualClock, _ context.CancelFunc) { c.err = boom },
			want:    []error{recordlock.ErrClusterUnavailable, boom},
		},
		{
			name:    "coordinator error from TryLock",
			arrange: func(c *testCoord, _ *recordlock.ManualClock, _ context.CancelFunc) { c.err = boom },
			try:     true,
			want:    []error{recordlock.ErrClusterUnavailable, boom},
		},
		{
			name: "coordinator says unavailable",
			arrange: func(c *testCoord, _ *recordlock.ManualClock, _ context.CancelFunc) {
				c.err = recordlock.ErrClusterUnavailable
			},
			want: []error{recordlock.ErrClusterUnavailable},
		},
		{
			name: "coordinator times out",
			arrange: func(c *testCoord, _ *recordlock.ManualClock, _ context.CancelFunc) {
				c.err = recordlock.ErrTimeout
			},
			want: []error{recordlock.ErrTimeout},
		},
		{
			name: "caller's ctx cancelled while the coordinator waits",
			arrange: func(c *testCoord, _ *recordlock.ManualClock, cancel context.CancelFunc) {
				c.gate = make(chan struct{})
				c.entered = make(chan context.Context, 1)
				go func() { <-c.entered; cancel() }()
			},
			want: []error{context.Canceled},
		},
		{
			name: "budget runs out while the coordinator waits",
			arrange: func(c *testCoord, clk *recordlock.ManualClock, _ context.CancelFunc) {
				c.gate = make(chan struct{})
				c.entered = make(chan context.Context, 1)
				go func() { <-c.entered; clk.Advance(time.Minute) }()
			},
			want: []error{recordlock.ErrTimeout},
		},
		{
			name: "budget runs out from TryLock",
			arrange: func(c *testCoord, clk *recordlock.ManualClock, _ context.CancelFunc) {
				c.gate = make(chan struct{})
				c.entered = make(chan context.Context, 1)
				go func() { <-c.entered; clk.Advance(time.Minute) }()
			},
			try:  true,
			want: []error{recordlock.ErrTimeout},
		},
		{
			name: "round already lapsed",
			arrange: func(c *testCoord, clk *recordlock.ManualClock, _ context.CancelFunc) {
				c.during = func() { clk.Advance(time.Second) } // the whole lease, since MintedMono
			},
			want:         []error{recordlock.ErrClusterUnavailable},
			wantReleases: 1,
		},
		{
			name: "round revoked before it was joined",
			arrange: func(c *testCoord, _ *recordlock.ManualClock, _ context.CancelFunc) {
				c.during = func() { // a recall racing the grant: the Locker has not joined yet
					c.mu.Lock()
					revoke := c.current
					c.mu.Unlock()
					revoke()
				}
			},
			want:         []error{recordlock.ErrClusterUnavailable},
			wantReleases: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, clk, l, other := lockerPair(t)
			c := newTestCoord(clk, l.Timestamp)
			l.SetCoordinator(c)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tc.arrange(c, clk, cancel)
			opts := recordlock.Options{Scope: recordlock.ScopeCluster, Lease: time.Second, Timeout: 30 * time.Second}
			var h *recordlock.Handle
			var err error
			if tc.try {
				h, err = l.TryLock([]byte("k"), opts)
			} else {
				h, err = l.Lock(ctx, []byte("k"), opts)
			}
			assert.Nil(t, h)
			for _, want := range tc.want {
				require.ErrorIs(t, err, want)
			}
			requireFree(t, other, "k")
			requireFree(t, l, "k")
			calls, releases := c.counts()
			assert.Equal(t, 1, calls)
			assert.Equal(t, tc.wantReleases, releases, "a round that was granted is released")
		})
	}
}

func TestClusterRoundIsJoined(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	c := newTestCoord(clk, l.Timestamp)
	c.entered, c.gate = make(chan context.Context, 1), make(chan struct{})
	c.during = func() { clk.Advance(time.Second) } // the granting request takes a second
	l.SetCoordinator(c)

	before := l.Timestamp()
	type result struct {
		h   *recordlock.Handle
		err error
	}
	res := make(chan result, 1)
	go func() {
		h, err := l.Lock(context.Background(), []byte("k"), recordlock.Options{Scope: recordlock.ScopeCluster, Lease: 5 * time.Second})
		res <- result{h, err}
	}()
	<-c.entered
	close(c.gate)
	r := <-res
	require.NoError(t, r.err)
	h := r.h

	tsR, ok := h.ClusterTsR()
	require.True(t, ok)
	assert.Greater(t, tsR, before)
	assert.Equal(t, tsR, h.AcquiredAt(), "AcquiredAt becomes the round's TsR")
	assert.Equal(t, uint64(1), h.Token())
	assert.Equal(t, recordlock.ScopeCluster, h.Scope())
	assert.Equal(t, tsR.Time().Add(5*time.Second), h.ExpiresAt())
	assert.Equal(t, tsR, h.NextHolderVersion(), "the version counter restarts at TsR")

	// The deadline is MintedMono+Lease (mono 5s), not the join instant plus the lease (6s).
	clk.Advance(4*time.Second - time.Nanosecond)
	assert.False(t, h.IsExpired())
	_, releases := c.counts()
	assert.Zero(t, releases)
	clk.Advance(time.Nanosecond)
	assert.True(t, h.IsLeaseExpired())
	_, releases = c.counts()
	assert.Equal(t, 1, releases, "the round's Release is the handle's release hook")
	assert.False(t, h.Release())

	// A second round of the key gets the next token, and Release ends it once.
	c.mu.Lock()
	c.gate, c.entered, c.during = nil, nil, nil
	c.mu.Unlock()
	h2, err := l.Lock(context.Background(), []byte("k"), recordlock.Options{Scope: recordlock.ScopeCluster})
	require.NoError(t, err)
	assert.Equal(t, uint64(2), h2.Token())
	require.True(t, h2.Release())
	require.False(t, h2.Release())
	_, releases = c.counts()
	assert.Equal(t, 2, releases)
}

// A round whose admission the coordinator recalled before Lock could join it fails with an error
// that says so, not as a lapsed round.
func TestClusterRoundRevokedDuringAcquire(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	l.SetCoordinator(&blockingCoord{clock: clk, revokeFirst: true})

	_, err := l.Lock(context.Background(), []byte("k"), recordlock.Options{})
	require.ErrorIs(t, err, recordlock.ErrClusterUnavailable)
	assert.Contains(t, err.Error(), "revoked")
	assert.NotContains(t, err.Error(), "lapsed")
	assert.True(t, recordlock.ProbeTableEmpty(l))
}

// revoke ends in RevokeLease: it takes the key back from a live holder, and it fences a write
// that was staged before Release, which a plain Release leaves valid until the lease ends.
func TestClusterRevoke(t *testing.T) {
	setup := func(t *testing.T) (*grocksdb.DB, *recordlock.Locker, *testCoord) {
		db := openDB(t)
		clk, l := manual(t, db)
		c := newTestCoord(clk, l.Timestamp)
		l.SetCoordinator(c)
		return db, l, c
	}
	opts := recordlock.Options{Scope: recordlock.ScopeCluster, Lease: time.Minute}
	// stageThenRelease locks "k", stages a write of "k" (to be committed through Fence), and
	// releases the lock before committing, as a Txn that unlocks early does.
	stageThenRelease := func(t *testing.T, db *grocksdb.DB, l *recordlock.Locker) (*recordlock.Handle, func() error) {
		h, err := l.Lock(context.Background(), []byte("k"), opts)
		require.NoError(t, err)
		wb := grocksdb.NewWriteBatch()
		t.Cleanup(wb.Destroy)
		wb.Put([]byte("k"), []byte("staged"))
		require.True(t, h.Release())
		commit := func() error {
			wo := grocksdb.NewDefaultWriteOptions()
			defer wo.Destroy()
			return db.Write(wo, wb)
		}
		return h, commit
	}
	landed := func(t *testing.T, db *grocksdb.DB) bool {
		ro := grocksdb.NewDefaultReadOptions()
		defer ro.Destroy()
		v, err := db.Get(ro, []byte("k"))
		require.NoError(t, err)
		defer v.Free()
		return v.Exists()
	}

	t.Run("without a recall a write staged before Release lands", func(t *testing.T) {
		db, l, _ := setup(t)
		h, commit := stageThenRelease(t, db, l)
		require.False(t, h.IsLeaseExpired())
		require.NoError(t, h.Fence(commit))
		assert.True(t, landed(t, db))
	})

	t.Run("a recall fences a write staged before Release", func(t *testing.T) {
		db, l, c := setup(t)
		h, commit := stageThenRelease(t, db, l)
		c.recall("k")
		assert.True(t, h.IsLeaseExpired(), "revoke ends in RevokeLease")
		require.ErrorIs(t, h.Fence(commit), recordlock.ErrLeaseExpired)
		assert.False(t, landed(t, db), "the fenced write must not land")
		_, releases := c.counts()
		assert.Equal(t, 1, releases, "the round was released once, by Release")
	})

	t.Run("a recall takes the key back from a live holder", func(t *testing.T) {
		_, l, c := setup(t)
		h, err := l.Lock(context.Background(), []byte("k"), opts)
		require.NoError(t, err)
		c.recall("k")
		assert.True(t, h.IsLeaseExpired())
		assert.True(t, h.IsExpired())
		select {
		case <-h.Done():
		default:
			t.Error("Done is not closed after a recall")
		}
		_, releases := c.counts()
		assert.Equal(t, 1, releases, "the round's Release fires on revocation")
		requireFree(t, l, "k")
		c.recall("k") // idempotent
		assert.False(t, h.Release())
		_, releases = c.counts()
		assert.Equal(t, 1, releases)
	})

	t.Run("a recall waits for a fenced write in flight", func(t *testing.T) {
		db, l, c := setup(t)
		h, err := l.Lock(context.Background(), []byte("k"), opts)
		require.NoError(t, err)
		inCommit, finish := make(chan struct{}), make(chan struct{})
		var committed atomic.Bool
		fenced := make(chan error, 1)
		go func() {
			fenced <- h.Fence(func() error {
				close(inCommit)
				<-finish
				wo := grocksdb.NewDefaultWriteOptions()
				defer wo.Destroy()
				err := db.Put(wo, []byte("k"), []byte("fenced"))
				committed.Store(true)
				return err
			})
		}()
		<-inCommit
		recalled := make(chan struct{})
		go func() { c.recall("k"); close(recalled) }()
		runtime.Gosched()
		close(finish)
		<-recalled
		assert.True(t, committed.Load(), "once revoke returns no fenced write is in flight")
		require.NoError(t, <-fenced)
		assert.True(t, landed(t, db))
		assert.True(t, h.IsLeaseExpired())
		requireFree(t, l, "k")
	})
}
