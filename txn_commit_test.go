package recordlock_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
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

// A lock held only for reading protects the Commit: a Txn that decided its write on a flag whose
// lease lapsed, and which another Txn changed meanwhile, writes nothing.
func TestTxnCommitChecksReadLocks(t *testing.T) {
	db, clk, l, other := lockerPair(t)
	ctx := context.Background()
	dbPut(t, db, "flag", "on")

	txn := l.Begin()
	defer txn.Rollback()
	flag, err := txn.Lock(ctx, []byte("flag"), recordlock.Options{Lease: 100 * time.Millisecond})
	require.NoError(t, err)
	rec, err := txn.Lock(ctx, []byte("rec"), recordlock.Options{Lease: 10 * time.Second})
	require.NoError(t, err)
	held, err := txn.Lock(ctx, []byte("held"), recordlock.Options{Lease: 10 * time.Second, Hold: true})
	require.NoError(t, err)
	v, err := txn.Get([]byte("flag"))
	require.NoError(t, err)
	require.Equal(t, []byte("on"), v)
	require.NoError(t, txn.Put([]byte("rec"), []byte("decided on flag=on")))

	clk.Advance(300 * time.Millisecond)
	rival := other.Begin()
	_, err = rival.Lock(ctx, []byte("flag"), recordlock.Options{})
	require.NoError(t, err, "the lapsed flag passes to a rival")
	require.NoError(t, rival.Put([]byte("flag"), []byte("off")))
	require.NoError(t, rival.Commit())

	fenced := l.Stats().Fenced
	require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired,
		"Commit checks every lock the Txn still holds, a read lock with nothing staged under it too")
	assert.Nil(t, dbGet(t, db, "rec"), "a write decided on a lapsed read does not land")
	assert.Equal(t, []byte("off"), dbGet(t, db, "flag"))
	assert.Equal(t, fenced+1, l.Stats().Fenced, "the refusal counts as fenced")
	assert.True(t, flag.IsLeaseExpired())
	assert.True(t, rec.IsExpired(), "a refused Commit releases the Txn's locks")
	assert.False(t, rec.IsLeaseExpired(), "released, not lapsed")
	assert.False(t, held.IsExpired(), "a held lock survives a refused Commit")
	assert.True(t, held.Release())
}

// Which locks Commit checks: the Txn's latest handle of each record unless a Release of it
// returned true, with or without a write staged under it, Hold or not.
func TestTxnCommitChecksLocksStillHeld(t *testing.T) {
	for _, tc := range []struct {
		name    string
		staged  bool // a write to "w" is staged
		end     func(t *testing.T, txn *recordlock.Txn, h *recordlock.Handle, clk *recordlock.ManualClock)
		wantErr error
	}{
		{name: "read lock live", end: func(*testing.T, *recordlock.Txn, *recordlock.Handle, *recordlock.ManualClock) {}},
		{name: "read lock lapsed", staged: true, wantErr: recordlock.ErrLeaseExpired,
			end: func(_ *testing.T, _ *recordlock.Txn, _ *recordlock.Handle, clk *recordlock.ManualClock) {
				clk.Advance(time.Second)
			}},
		{name: "read lock revoked", staged: true, wantErr: recordlock.ErrLeaseExpired,
			end: func(_ *testing.T, _ *recordlock.Txn, h *recordlock.Handle, _ *recordlock.ManualClock) {
				h.RevokeLease()
			}},
		{name: "read-only Txn, read lock lapsed", wantErr: recordlock.ErrLeaseExpired,
			end: func(_ *testing.T, _ *recordlock.Txn, _ *recordlock.Handle, clk *recordlock.ManualClock) {
				clk.Advance(time.Second)
			}},
		{name: "released, then lapsed: not checked", staged: true,
			end: func(t *testing.T, _ *recordlock.Txn, h *recordlock.Handle, clk *recordlock.ManualClock) {
				require.True(t, h.Release())
				clk.Advance(time.Second)
			}},
		{name: "Release false after the lapse: still checked", staged: true, wantErr: recordlock.ErrLeaseExpired,
			end: func(t *testing.T, _ *recordlock.Txn, h *recordlock.Handle, clk *recordlock.ManualClock) {
				clk.Advance(time.Second)
				require.False(t, h.Release())
			}},
		{name: "re-locked after the lapse: checked through the new handle", staged: true,
			end: func(t *testing.T, txn *recordlock.Txn, h *recordlock.Handle, clk *recordlock.ManualClock) {
				clk.Advance(time.Second)
				h2, err := txn.Lock(context.Background(), []byte("r"), recordlock.Options{Lease: time.Second})
				require.NoError(t, err)
				require.NotSame(t, h, h2)
			}},
		{name: "new handle lapsed too", staged: true, wantErr: recordlock.ErrLeaseExpired,
			end: func(t *testing.T, txn *recordlock.Txn, _ *recordlock.Handle, clk *recordlock.ManualClock) {
				clk.Advance(time.Second)
				_, err := txn.Lock(context.Background(), []byte("r"), recordlock.Options{Lease: time.Second})
				require.NoError(t, err)
				clk.Advance(time.Second)
			}},
		{name: "hold lock lapsed", staged: true, wantErr: recordlock.ErrLeaseExpired,
			end: func(t *testing.T, txn *recordlock.Txn, h *recordlock.Handle, clk *recordlock.ManualClock) {
				_, err := txn.Lock(context.Background(), []byte("r"), recordlock.Options{Lease: time.Second, Hold: true})
				require.NoError(t, err)
				require.True(t, h.Hold())
				clk.Advance(time.Second)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openDB(t)
			clk, l := manual(t, db)
			ctx := context.Background()
			txn := l.Begin()
			defer txn.Rollback()
			r, err := txn.Lock(ctx, []byte("r"), recordlock.Options{Lease: time.Second})
			require.NoError(t, err)
			_, err = txn.Get([]byte("r"))
			require.NoError(t, err)
			w, err := txn.Lock(ctx, []byte("w"), recordlock.Options{Lease: time.Minute})
			require.NoError(t, err)
			if tc.staged {
				require.NoError(t, txn.Put([]byte("w"), []byte("v")))
			}
			tc.end(t, txn, r, clk)
			fenced := l.Stats().Fenced
			err = txn.Commit()
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr, "Commit writes nothing once the lease of a lock it checks has ended")
				assert.Nil(t, dbGet(t, db, "w"), "nothing is written")
				assert.Equal(t, fenced+1, l.Stats().Fenced)
			} else {
				require.NoError(t, err)
				if tc.staged {
					assert.Equal(t, []byte("v"), dbGet(t, db, "w"))
				}
				assert.Equal(t, fenced, l.Stats().Fenced)
			}
			assert.True(t, w.IsExpired(), "Commit released the lock without Hold")
			assert.False(t, w.IsLeaseExpired(), "released, not lapsed")
			assert.True(t, recordlock.ProbeTableEmpty(l), "nothing is left locked or scheduled")
		})
	}
}

// A multi-key Commit is all-or-nothing: if one protecting lease lapsed, no key changed.
func TestTxnCommitAllOrNothing(t *testing.T) {
	keys := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name  string
		dead  string
		end   func(clk *recordlock.ManualClock, h *recordlock.Handle)
		lease time.Duration
	}{
		{name: "first key lapses", dead: "a", end: func(clk *recordlock.ManualClock, _ *recordlock.Handle) { clk.Advance(time.Second) }},
		{name: "last key lapses", dead: "c", end: func(clk *recordlock.ManualClock, _ *recordlock.Handle) { clk.Advance(time.Second) }},
		{name: "middle key revoked", dead: "b", end: func(_ *recordlock.ManualClock, h *recordlock.Handle) { h.RevokeLease() }},
		{name: "released then lapsed", dead: "b", end: func(clk *recordlock.ManualClock, h *recordlock.Handle) {
			h.Release()
			clk.Advance(time.Second)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openDB(t)
			clk, l := manual(t, db)
			ctx := context.Background()
			for _, k := range keys {
				dbPut(t, db, k, "old")
			}
			txn := beginUnlocked(t, l)
			defer txn.Rollback()
			handles := map[string]*recordlock.Handle{}
			for _, k := range keys {
				lease := 10 * time.Second
				if k == tc.dead {
					lease = time.Second
				}
				h, err := txn.Lock(ctx, []byte(k), recordlock.Options{Lease: lease})
				require.NoError(t, err)
				handles[k] = h
				require.NoError(t, txn.Put([]byte(k), []byte("new")))
			}
			require.NoError(t, txn.Put([]byte("plain"), []byte("new")))
			require.NoError(t, txn.Delete([]byte("a")))

			tc.end(clk, handles[tc.dead])
			require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired)
			for _, k := range keys {
				assert.Equal(t, []byte("old"), dbGet(t, db, k), "key %s", k)
				assert.True(t, handles[k].IsExpired(), "Commit released %s", k)
			}
			assert.Nil(t, dbGet(t, db, "plain"), "the plain write of a fenced batch does not land either")
		})
	}
}

// Lease lapse between Put and Commit: ErrLeaseExpired, nothing written, sibling locks
// released, and a waiter on a sibling key proceeds at once.
func TestTxnLeaseLapseBeforeCommitReleasesSiblings(t *testing.T) {
	db, clk, l, other := lockerPair(t)
	ctx := context.Background()

	txn := l.Begin()
	defer txn.Rollback()
	short, err := txn.Lock(ctx, []byte("a"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	sibling, err := txn.Lock(ctx, []byte("b"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	held, err := txn.Lock(ctx, []byte("held"), recordlock.Options{Lease: time.Minute, Hold: true})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("a"), []byte("1")))
	require.NoError(t, txn.Put([]byte("b"), []byte("1")))
	require.NoError(t, txn.Put([]byte("held"), []byte("1")))

	waiter := lockAsync(context.Background(), other, []byte("b"), recordlock.Options{Timeout: time.Minute})
	waitQueued(t, l, []byte("b"), 1)
	clk.Advance(time.Second)
	require.True(t, short.IsLeaseExpired())
	require.False(t, sibling.IsExpired())

	require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired)
	// The clock does not move again, so the waiter's only way out is the sibling's release.
	res := testutil.Await(t, waiter, "the sibling waiter's grant")
	require.NoError(t, res.err)
	assert.True(t, sibling.IsExpired())
	assert.False(t, held.IsExpired(), "a held lock survives a fenced Commit")
	for _, k := range []string{"a", "b", "held"} {
		assert.Nil(t, dbGet(t, db, k), "key %s", k)
	}
	assert.True(t, res.h.Release())
	assert.True(t, held.Release())
}

// A Commit with nothing staged checks the locks the Txn holds, writes nothing, and releases them:
// a lapsed lease makes it ErrLeaseExpired.
func TestTxnEmptyCommitChecksAndReleases(t *testing.T) {
	db := openDB(t)
	clk, l := manual(t, db)
	txn := l.Begin()
	a, err := txn.Lock(context.Background(), []byte("a"), recordlock.Options{Lease: time.Second})
	require.NoError(t, err)
	b, err := txn.Lock(context.Background(), []byte("b"), recordlock.Options{Lease: time.Minute})
	require.NoError(t, err)
	clk.Advance(time.Second)
	require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired)
	assert.True(t, a.IsLeaseExpired())
	assert.True(t, b.IsExpired())
	assert.False(t, b.IsLeaseExpired(), "released, not lapsed")
}

// No lost update under stalls, on the real clock: transactions that stall past their lease
// are fenced, so every counter equals the number of increments that committed.
//
// Each worker stays on one counter and moves to the next when its Lock times out (the holder is
// then most likely stalled): if every worker waited out every stall, the run would take a minute
// of mostly idle waiting; this way it is bounded by the workers' own stalls.
func TestTxnNoLostUpdateUnderStalls(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds of real time")
	}
	const (
		workers    = 8
		counters   = 4
		lease      = 100 * time.Millisecond
		stall      = 150 * time.Millisecond
		stallEvery = 100 // about 1% of transactions
		timeout    = 10 * time.Millisecond
	)
	increments := stressCount(500, 2000) // per worker and counter
	db := openDB(t)
	l := newLocker(t, db)
	ctx := context.Background()
	var (
		committed [counters]atomic.Int64
		fenced    atomic.Int64
		timeouts  atomic.Int64
		wg        sync.WaitGroup
	)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			c := w % counters
			for i := 0; i < counters*increments; {
				key := []byte("counter-" + strconv.Itoa(c))
				stalls := i%stallEvery == stallEvery-1
				err := increment(ctx, l, key, recordlock.Options{Lease: lease, Timeout: timeout}, stalls, stall)
				switch {
				case err == nil:
					committed[c].Add(1)
				case errors.Is(err, recordlock.ErrLeaseExpired):
					fenced.Add(1)
				case errors.Is(err, recordlock.ErrTimeout):
					timeouts.Add(1)
					c = (c + 1) % counters
					continue // not an attempt: nothing was staged
				default:
					t.Errorf("worker %d: %v", w, err)
					return
				}
				i++
			}
		})
	}
	wg.Wait()
	var total int64
	for c := range counters {
		got, err := strconv.ParseInt(string(dbGet(t, db, "counter-"+strconv.Itoa(c))), 10, 64)
		require.NoError(t, err)
		assert.Equal(t, committed[c].Load(), got, "counter %d: value read back vs successful commits", c)
		t.Logf("counter %d: %d successful commits, %d read back", c, committed[c].Load(), got)
		total += committed[c].Load()
	}
	assert.Equal(t, int64(workers*counters*increments), total+fenced.Load(), "every attempt either committed or was fenced")
	assert.GreaterOrEqual(t, fenced.Load(), int64(workers*counters*increments/stallEvery), "every stalled transaction was fenced")
	t.Logf("%d commits, %d fenced, %d lock timeouts, %v", total, fenced.Load(), timeouts.Load(), time.Since(start).Round(time.Millisecond))
}

// increment adds one to the decimal counter at key in one Txn, stalling before Commit if asked.
func increment(ctx context.Context, l *recordlock.Locker, key []byte, opts recordlock.Options, stalls bool, stall time.Duration) error {
	txn := l.Begin()
	defer txn.Rollback()
	if _, err := txn.Lock(ctx, key, opts); err != nil {
		return err
	}
	v, err := txn.Get(key)
	if err != nil {
		return err
	}
	n := 0
	if v != nil {
		if n, err = strconv.Atoi(string(v)); err != nil {
			return err
		}
	}
	if err := txn.Put(key, []byte(strconv.Itoa(n+1))); err != nil {
		return err
	}
	if stalls {
		time.Sleep(stall) // real time is the thing under test: the holder outlives its lease
	}
	return txn.Commit()
}

// One Commit writing several column families is one atomic write: a reader on a snapshot never
// sees one family's write without the other's, and with one protecting lease revoked neither
// lands.
func TestColumnFamiliesCommitAtomically(t *testing.T) {
	db, cfs := openCFDB(t, "one", "two")
	one, two := cfs[0], cfs[1]
	l := newLocker(t, db)
	ctx := context.Background()
	key := []byte("k")

	t.Run("fenced", func(t *testing.T) {
		txn := l.Begin()
		defer txn.Rollback()
		h1, err := txn.LockCF(ctx, one, key, recordlock.Options{})
		require.NoError(t, err)
		_, err = txn.LockCF(ctx, two, key, recordlock.Options{})
		require.NoError(t, err)
		require.NoError(t, txn.PutCF(one, key, []byte("x")))
		require.NoError(t, txn.PutCF(two, key, []byte("x")))
		h1.RevokeLease()
		require.ErrorIs(t, txn.Commit(), recordlock.ErrLeaseExpired)
		assert.Nil(t, cfGet(t, db, one, "k"))
		assert.Nil(t, cfGet(t, db, two, "k"), "with one lease revoked neither family is written")
	})

	t.Run("atomic", func(t *testing.T) {
		const rounds = 200
		stop := make(chan struct{})
		done := make(chan struct{})
		var checked atomic.Int64 // snapshots the reader has checked
		go func() {
			defer close(done)
			ro := grocksdb.NewDefaultReadOptions()
			defer ro.Destroy()
			for {
				select {
				case <-stop:
					return
				default:
				}
				snap := db.NewSnapshot()
				ro.SetSnapshot(snap)
				a, errA := db.GetCF(ro, one, key)
				b, errB := db.GetCF(ro, two, key)
				if assert.NoError(t, errA) && assert.NoError(t, errB) {
					assert.Equal(t, string(a.Data()), string(b.Data()), "a snapshot saw half a commit")
					a.Free()
					b.Free()
				}
				db.ReleaseSnapshot(snap)
				checked.Add(1)
			}
		}()
		for i := range rounds {
			// The reader checks a snapshot between every two commits, however the two goroutines
			// are scheduled, so that its reads interleave with the commits.
			for from := checked.Load(); checked.Load() == from; {
				runtime.Gosched()
			}
			txn := l.Begin()
			hs, err := txn.LockAllCF(ctx, one, recordlock.Options{}, key)
			require.NoError(t, err)
			_, err = txn.LockCF(ctx, two, key, recordlock.Options{})
			require.NoError(t, err)
			v := []byte{byte(i)}
			require.NoError(t, txn.PutCF(one, key, v))
			require.NoError(t, txn.PutCF(two, key, v))
			require.NoError(t, txn.Commit())
			assert.True(t, hs[0].IsExpired())
		}
		close(stop)
		testutil.Await(t, done, "the reader")
		assert.Equal(t, []byte{rounds - 1}, cfGet(t, db, one, "k"))
		assert.Equal(t, []byte{rounds - 1}, cfGet(t, db, two, "k"))
	})
}
