package recordlock_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/recordlock/recordlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A deadline of any distance is valid: a ctx deadline in year 9999, or
// context.WithTimeout(ctx, math.MaxInt64), means "no deadline". Every path that adds a duration to
// a Mono reading is driven with one, in every shard at once, and then every shard must still end
// other keys' leases and waits on time (docs/DESIGN.md §7): a sum that wrapped into the past
// would top its shard's deadline heap and arm the timer centuries ahead.
func TestFarDeadlineKeepsEveryShardOnTime(t *testing.T) {
	year9999 := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	deadlines := map[string]func() (context.Context, context.CancelFunc){
		"year 9999": func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), year9999)
		},
		"MaxInt64 timeout": func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), math.MaxInt64)
		},
	}
	for dname, far := range deadlines {
		for _, p := range farPaths {
			t.Run(dname+"/"+p.name, func(t *testing.T) {
				db := openDB(t)
				clk, l := manual(t, db)
				clk.Advance(time.Second) // a Mono reading above zero, as any clock has once it runs
				c := newTestCoord(clk, l.Timestamp)
				c.gate, c.entered = make(chan struct{}), make(chan context.Context, 2*len(farPaths)*128)
				ctx, cancel := far()
				defer cancel()
				done := p.start(t, ctx, farSetup{clk: clk, l: l, c: c, keys: recordlock.KeyPerShard(l, "far"), cancel: cancel})

				requireShardsOnTime(t, clk, l)

				close(c.gate)
				done()
				c.mu.Lock()
				defer c.mu.Unlock()
				assert.LessOrEqual(t, c.maxInFlight, 1, "two cluster requests for one key at once")
			})
		}
	}
}

// farSetup is what a far-deadline path works with: a Locker on a ManualClock, a coordinator held
// at its gate, and one key in each shard.
type farSetup struct {
	clk  *recordlock.ManualClock
	l    *recordlock.Locker
	c    *testCoord
	keys [][]byte
	// cancel ends the far ctx: the waits started with it fail, while the cluster rounds, once
	// the gate is open, are granted.
	cancel context.CancelFunc
}

// farPath starts requests with a far deadline on every key of s, leaves them in the state that
// puts the far deadline on the table (waiting, or holding with a moved lease) and returns what
// ends them once the coordinator's gate is open.
type farPath struct {
	name  string
	start func(t *testing.T, ctx context.Context, s farSetup) (done func())
}

var farPaths = []farPath{
	{"Lock", func(t *testing.T, ctx context.Context, s farSetup) func() {
		return waitBehindHolders(t, s, false, func(k []byte) error {
			_, err := s.l.Lock(ctx, k, recordlock.Options{})
			return err
		})
	}},
	{"Txn.Lock", func(t *testing.T, ctx context.Context, s farSetup) func() {
		return waitBehindHolders(t, s, false, func(k []byte) error {
			txn := s.l.Begin()
			defer txn.Rollback()
			_, err := txn.Lock(ctx, k, recordlock.Options{})
			return err
		})
	}},
	{"Txn upgrade", func(t *testing.T, ctx context.Context, s farSetup) func() {
		return waitBehindHolders(t, s, true, func(k []byte) error {
			txn := s.l.Begin()
			defer txn.Rollback()
			if _, err := txn.Lock(ctx, k, recordlock.Options{Shared: true}); err != nil {
				return err
			}
			_, err := txn.Lock(ctx, k, recordlock.Options{})
			return err
		})
	}},
	{"LockAll", func(t *testing.T, ctx context.Context, s farSetup) func() {
		return waitBehindHolders(t, s, false, func(k []byte) error {
			txn := s.l.Begin()
			defer txn.Rollback()
			_, err := txn.LockAll(ctx, recordlock.Options{}, k)
			return err
		})
	}},
	{"LockAll upgrade", func(t *testing.T, ctx context.Context, s farSetup) func() {
		return waitBehindHolders(t, s, true, func(k []byte) error {
			txn := s.l.Begin()
			defer txn.Rollback()
			if _, err := txn.Lock(ctx, k, recordlock.Options{Shared: true}); err != nil {
				return err
			}
			_, err := txn.LockAll(ctx, recordlock.Options{}, k)
			return err
		})
	}},
	{"Renew", func(t *testing.T, ctx context.Context, s farSetup) func() {
		return holdAll(t, s, func(h *recordlock.Handle) error { return h.Renew(time.Minute) }, ctx)
	}},
	{"UpgradeToHold", func(t *testing.T, ctx context.Context, s farSetup) func() {
		return holdAll(t, s, func(h *recordlock.Handle) error { return h.UpgradeToHold(time.Minute) }, ctx)
	}},
	{"cluster Lock", func(t *testing.T, ctx context.Context, s farSetup) func() {
		return roundsInFlight(t, s, func(k []byte) (*recordlock.Handle, error) {
			return s.l.Lock(ctx, k, recordlock.Options{Scope: recordlock.ScopeCluster, Lease: time.Minute})
		})
	}},
	{"cluster TryLock", func(t *testing.T, _ context.Context, s farSetup) func() {
		return roundsInFlight(t, s, func(k []byte) (*recordlock.Handle, error) {
			return s.l.TryLock(k, recordlock.Options{Scope: recordlock.ScopeCluster, Lease: time.Minute, Timeout: recordlock.MaxTimeout})
		})
	}},
}

// waitBehindHolders holds every key of s with a plain lock (shared ones when shared) and runs
// lock on each in a goroutine, where it waits. done requires every lock to have failed with the
// ctx's error and gives the keys back.
func waitBehindHolders(t *testing.T, s farSetup, shared bool, lock func(k []byte) error) func() {
	t.Helper()
	var holders []*recordlock.Handle
	results := make(chan error, len(s.keys))
	for _, k := range s.keys {
		h, err := s.l.Lock(context.Background(), k, recordlock.Options{Lease: time.Minute, Shared: shared})
		require.NoError(t, err)
		holders = append(holders, h)
		go func() { results <- lock(k) }()
		waitQueued(t, s.l, k, 1)
	}
	return func() {
		s.cancel()
		for range s.keys {
			require.ErrorIs(t, testutil.Await(t, results, "a far-deadline wait"), context.Canceled)
		}
		for _, h := range holders {
			h.Release()
		}
	}
}

// holdAll locks every key of s with ctx and moves each lease with move; the handles keep their
// new one-minute leases while the shards are checked, and must still hold their keys then.
func holdAll(t *testing.T, s farSetup, move func(*recordlock.Handle) error, ctx context.Context) func() {
	t.Helper()
	var hs []*recordlock.Handle
	for _, k := range s.keys {
		txn := s.l.Begin()
		h, err := txn.Lock(ctx, k, recordlock.Options{Lease: recordlock.MinLease})
		require.NoError(t, err)
		require.NoError(t, move(h))
		hs = append(hs, h)
		t.Cleanup(txn.Rollback)
	}
	return func() {
		for _, h := range hs {
			assert.False(t, h.IsExpired(), "a lease moved to a minute ended within a second")
			h.Release()
		}
	}
}

// roundsInFlight runs lock on every key of s in a goroutine; each takes its local key and waits
// at the coordinator's gate. The local key must stay held meanwhile: another lock of it on this
// node must neither take it nor ask the cluster for it. done requires every lock to have been
// granted once the gate opened, and releases it.
func roundsInFlight(t *testing.T, s farSetup, lock func(k []byte) (*recordlock.Handle, error)) func() {
	t.Helper()
	s.l.SetCoordinator(s.c)
	results := make(chan lockResult, len(s.keys))
	for _, k := range s.keys {
		go func() {
			h, err := lock(k)
			results <- lockResult{h, err}
		}()
		testutil.Await(t, s.c.entered, "a round requested")
	}
	for _, k := range s.keys {
		_, err := s.l.TryLock(k, recordlock.Options{Scope: recordlock.ScopeNode})
		require.ErrorIs(t, err, recordlock.ErrLocked, "the local key of a round in flight was free")
	}
	return func() {
		for range s.keys {
			r := testutil.Await(t, results, "a far-deadline cluster lock")
			require.NoError(t, r.err)
			r.h.Release()
		}
	}
}

// requireShardsOnTime checks that every shard of l still ends a lease at its deadline and a wait
// at its timeout: in each shard a key whose 100 ms lease has a waiter behind it, which must be
// granted once the lease ends, and a key held for a minute whose waiter must time out at 300 ms.
func requireShardsOnTime(t *testing.T, clk *recordlock.ManualClock, l *recordlock.Locker) {
	t.Helper()
	leaseKeys, waitKeys := recordlock.KeyPerShard(l, "lease"), recordlock.KeyPerShard(l, "wait")
	node := recordlock.ScopeNode // the coordinator, if set, is held at its gate
	var holders []*recordlock.Handle
	var granted, timedOut []<-chan lockResult
	for i := range leaseKeys {
		h, err := l.Lock(context.Background(), leaseKeys[i], recordlock.Options{Lease: recordlock.MinLease, Scope: node})
		require.NoError(t, err)
		holders = append(holders, h)
		granted = append(granted, lockAsync(context.Background(), l, leaseKeys[i], recordlock.Options{Timeout: 300 * time.Millisecond, Scope: node}))
		waitQueued(t, l, leaseKeys[i], 1)

		h, err = l.Lock(context.Background(), waitKeys[i], recordlock.Options{Lease: time.Minute, Scope: node})
		require.NoError(t, err)
		holders = append(holders, h)
		timedOut = append(timedOut, lockAsync(context.Background(), l, waitKeys[i], recordlock.Options{Timeout: 300 * time.Millisecond, Scope: node}))
		waitQueued(t, l, waitKeys[i], 1)
	}
	clk.Advance(recordlock.MinLease)
	for i, c := range granted {
		r := testutil.Await(t, c, "the waiter of a lease that ended in shard "+string(leaseKeys[i]))
		require.NoError(t, r.err)
		r.h.Release()
	}
	clk.Advance(200 * time.Millisecond)
	for _, c := range timedOut {
		require.ErrorIs(t, testutil.Await(t, c, "a wait that timed out").err, recordlock.ErrTimeout)
	}
	for _, h := range holders {
		h.Release()
	}
}
