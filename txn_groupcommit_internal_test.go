package recordlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/tempdb"
)

// groupWrites is a Locker whose commit queue reports each RocksDB write it makes, and whose first
// write can be held in flight so that the tests can queue commits behind it.
type groupWrites struct {
	l     *Locker
	clk   *ManualClock
	mu    sync.Mutex
	sizes []int // how many Txns each write carried, in the order written
	held  chan struct{}
	gate  chan struct{}
	open  sync.Once // closes gate once
	// panicAt is the write (1 for the first) whose hook panics just before RocksDB is called;
	// 0 for none. Set before the first commit.
	panicAt int
}

// newGroupWrites returns a groupWrites over db whose next write waits, once it has begun, until
// release is called, and whose group writes begin 20 ms late.
func newGroupWrites(t *testing.T, db *grocksdb.DB) *groupWrites {
	t.Helper()
	g := &groupWrites{
		clk:  NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
		held: make(chan struct{}),
		gate: make(chan struct{}),
	}
	l, err := New(db, WithClock(g.clk), failpointsOption{failpoints{groupWrite: func(n int) {
		g.mu.Lock()
		g.sizes = append(g.sizes, n)
		nth := len(g.sizes)
		g.mu.Unlock()
		switch {
		case nth == 1:
			close(g.held)
			<-g.gate
		case n > 1:
			// A Txn told its batch was written before the write was made would read its
			// key back before it lands (commit checks) while the write is held up here.
			time.Sleep(20 * time.Millisecond)
		}
		if nth == g.panicAt {
			panic(fmt.Sprintf("write %d fails", nth))
		}
	}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	t.Cleanup(g.release) // before Close: a test that failed early must not leave the write held
	g.l = l
	return g
}

// commit commits, in a goroutine of its own, a Txn begun with opts that locks key and writes
// value to it. It returns the Txn's result; a Commit that succeeds must have landed its write by
// the time it returns, which the goroutine checks at once, reading key back.
func (g *groupWrites) commit(t *testing.T, opts TxnOptions, key, value string) <-chan error {
	t.Helper()
	txn, err := g.l.BeginTx(opts)
	require.NoError(t, err)
	_, err = txn.Lock(context.Background(), []byte(key), Options{Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte(key), []byte(value)))
	done := make(chan error, 1)
	go func() {
		defer txn.Rollback()
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("%w: %v", errCommitPanicked, r)
			}
		}()
		err := txn.Commit()
		if err == nil {
			ro := grocksdb.NewDefaultReadOptions()
			defer ro.Destroy()
			got, rerr := g.l.db.GetBytes(ro, []byte(key))
			switch {
			case rerr != nil:
				err = rerr
			case string(got) != value:
				err = fmt.Errorf("Commit of %s returned before its write landed: read %q", key, got)
			}
		}
		done <- err
	}()
	return done
}

// errCommitPanicked is what groupWrites.commit reports for a Commit that panicked.
var errCommitPanicked = errors.New("Commit panicked")

// holdFirst commits key=value and returns once its write is in flight, held until release.
func (g *groupWrites) holdFirst(t *testing.T, key, value string) <-chan error {
	t.Helper()
	done := g.commit(t, TxnOptions{}, key, value)
	testutil.Await(t, g.held, "the first commit's write")
	return done
}

// queue commits key=value with opts and returns once that commit waits in the queue, behind n-1
// others.
func (g *groupWrites) queue(t *testing.T, opts TxnOptions, key, value string, n int) <-chan error {
	t.Helper()
	done := g.commit(t, opts, key, value)
	require.Eventually(t, func() bool { return g.queued() == n }, testutil.Guard, 200*time.Microsecond,
		"waiting for %d queued commits", n)
	return done
}

func (g *groupWrites) queued() int {
	q := &g.l.commits
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

func (g *groupWrites) release() { g.open.Do(func() { close(g.gate) }) }

func (g *groupWrites) writes() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.sizes...)
}

// Txns that reach Commit while a write is in flight are written together, in one RocksDB write
// once it returns, and each of their commits has landed when it returns.
func TestConcurrentCommitsShareOneWrite(t *testing.T) {
	db := tempdb.New(t)
	g := newGroupWrites(t, db)
	first := g.holdFirst(t, "first", "v")
	var queued []<-chan error
	for i := range 5 {
		queued = append(queued, g.queue(t, TxnOptions{}, fmt.Sprint("k", i), fmt.Sprint("v", i), i+1))
	}
	g.release()
	require.NoError(t, testutil.Await(t, first, "Commit"))
	for _, done := range queued {
		require.NoError(t, testutil.Await(t, done, "Commit"))
	}
	assert.Equal(t, []int{1, 5}, g.writes(), "the five queued commits share one write")
	for i := range 5 {
		assert.Equal(t, fmt.Sprint("v", i), string(DBGet(t, db, fmt.Sprint("k", i))))
	}
	assert.Zero(t, g.queued())
	assert.True(t, g.l.tab.Empty(), "every lock was released")
}

// A group write carries only Txns with the write options of its leader, the oldest queued: the
// others wait, in their order, for a write of their own options.
func TestGroupWriteTakesOnlyItsWriteOptions(t *testing.T) {
	db := tempdb.New(t)
	g := newGroupWrites(t, db)
	first := g.holdFirst(t, "first", "v")
	var queued []<-chan error
	for i, opts := range []TxnOptions{{Sync: true}, {}, {DisableWAL: true}, {}, {Sync: true}} {
		queued = append(queued, g.queue(t, opts, fmt.Sprint("k", i), "v", i+1))
	}
	g.release()
	require.NoError(t, testutil.Await(t, first, "Commit"))
	for _, done := range queued {
		require.NoError(t, testutil.Await(t, done, "Commit"))
	}
	// Sync leads and takes the other Sync; then the two plain ones; then DisableWAL alone.
	assert.Equal(t, []int{1, 2, 2, 1}, g.writes(),
		"Sync and DisableWAL are each Commit's own write options, so a group write takes only Txns with its own")
	for i := range 5 {
		assert.Equal(t, "v", string(DBGet(t, db, fmt.Sprint("k", i))))
	}
}

// A group write stops taking Txns once the batches it took past its leader's reach
// maxGroupBytes; the rest are written by the next group.
func TestGroupWriteBoundedInBytes(t *testing.T) {
	db := tempdb.New(t)
	g := newGroupWrites(t, db)
	first := g.holdFirst(t, "first", "v")
	big := string(make([]byte, maxGroupBytes/2+1))
	var queued []<-chan error
	for i := range 5 {
		queued = append(queued, g.queue(t, TxnOptions{}, fmt.Sprint("k", i), big, i+1))
	}
	g.release()
	require.NoError(t, testutil.Await(t, first, "Commit"))
	for _, done := range queued {
		require.NoError(t, testutil.Await(t, done, "Commit"))
	}
	// Each group: its leader, then two more, after which the bound is passed.
	assert.Equal(t, []int{1, 3, 2}, g.writes())
	for i := range 5 {
		assert.Len(t, DBGet(t, db, fmt.Sprint("k", i)), len(big))
	}
}

// A commit waiting in the queue is inside its fences: its lease lapsing while it waits neither
// stops its write nor lets another take the key before the write has landed. A successor that
// then queues for the key hurries the commit out of the queue (hurry) and gets the key once the
// write has landed.
func TestQueuedCommitStaysFenced(t *testing.T) {
	db := tempdb.New(t)
	g := newGroupWrites(t, db)
	other := newTestLocker(t, db, g.clk)
	ctx := context.Background()
	first := g.holdFirst(t, "first", "v")

	txn := g.l.Begin()
	t.Cleanup(txn.Rollback) // after the Commit's goroutine has ended (testutil.Go)
	h, err := txn.Lock(ctx, []byte("k"), Options{Lease: time.Second})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("k"), []byte("queued")))
	done := make(chan error, 1)
	testutil.Go(t, ctx, func(context.Context) { done <- txn.Commit() })
	t.Cleanup(g.release) // runs before the Commit is waited for: it may queue behind the held write
	require.Eventually(t, func() bool { return g.queued() == 1 }, testutil.Guard, 200*time.Microsecond)

	g.clk.Advance(2 * time.Second) // the lease lapses while the commit waits for its write
	assert.True(t, h.IsLeaseExpired())
	_, err = other.TryLock([]byte("k"), Options{})
	require.ErrorIs(t, err, ErrLocked, "the key must not pass on while the commit waits")
	select {
	case err := <-done:
		t.Fatalf("the commit returned while the write ahead of it was held: %v", err)
	default:
	}

	successor := lockAsync(ctx, other, []byte("k"), Options{Timeout: time.Minute})
	require.NoError(t, testutil.Await(t, done, "Commit"), "a commit that entered its fences in time lands")
	got := testutil.Await(t, successor, "the successor's grant after the commit")
	require.NoError(t, got.err)
	assert.Equal(t, "queued", string(DBGet(t, db, "k")), "the successor reads the queued commit's write")
	assert.True(t, got.h.Release())
	g.release()
	require.NoError(t, testutil.Await(t, first, "Commit"))
}

// A Txn that holds a key another request waits for does not park behind the write in flight:
// it writes at once, beside it. A Txn nobody waits for parks as before.
func TestWaitedOnCommitWritesAtOnce(t *testing.T) {
	db := tempdb.New(t)
	g := newGroupWrites(t, db)
	ctx := context.Background()
	first := g.holdFirst(t, "first", "v")

	holder := g.l.Begin() // no deferred Rollback: it would wait for a Commit held in its fence
	_, err := holder.Lock(ctx, []byte("hot"), Options{Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, holder.Put([]byte("hot"), []byte("v")))
	successor := lockAsync(ctx, g.l, []byte("hot"), Options{Timeout: time.Minute})
	WaitQueued(t, g.l, []byte("hot"), 1)
	done := make(chan error, 1)
	go func() { done <- holder.Commit() }()
	require.NoError(t, testutil.Await(t, done, "the waited-on Commit, while the first write is held"))
	assert.Equal(t, "v", string(DBGet(t, db, "hot")))
	got := testutil.Await(t, successor, "the successor's grant")
	require.NoError(t, got.err)
	assert.True(t, got.h.Release())

	parked := g.queue(t, TxnOptions{}, "cold", "v", 1) // nobody waits for it: it parks
	g.release()
	require.NoError(t, testutil.Await(t, first, "Commit"))
	require.NoError(t, testutil.Await(t, parked, "the parked Commit"))
	assert.Equal(t, []int{1, 1, 1}, g.writes())
}

// A Txn parked behind the write in flight, while nobody waited for its keys, leaves the queue
// and writes at once beside it as soon as a request queues for one of them: that request waits
// for its commit, not for the queue.
func TestParkedCommitHurriesWhenWaitedOn(t *testing.T) {
	db := tempdb.New(t)
	g := newGroupWrites(t, db)
	first := g.holdFirst(t, "first", "v")
	parked := g.queue(t, TxnOptions{}, "hot", "v", 1) // nobody waits for "hot" yet: it parks

	successor := lockAsync(context.Background(), g.l, []byte("hot"), Options{Timeout: time.Minute})
	require.NoError(t, testutil.Await(t, parked, "the parked Commit, waited on, with the first write held"))
	got := testutil.Await(t, successor, "the successor's grant")
	require.NoError(t, got.err)
	assert.Equal(t, "v", string(DBGet(t, db, "hot")))
	assert.True(t, got.h.Release())
	assert.Equal(t, 0, g.queued())

	g.release()
	require.NoError(t, testutil.Await(t, first, "Commit"))
	assert.Equal(t, []int{1, 1}, g.writes(), "the held write, and the hurried one beside it")
}

// An unmergeable batch writes with nothing beside it: parked at the head of the queue, it waits
// for the bypass in flight to end, and a waited-on commit arriving then parks behind it instead
// of bypassing, so bypasses cannot keep it waiting.
func TestUnmergeableBatchWaitsForBypasses(t *testing.T) {
	db, cfs := tempdb.NewCF(t, "other")
	ctx := context.Background()
	var mu sync.Mutex
	var sizes []int
	held := make(chan int, 2)
	gates := []chan struct{}{make(chan struct{}), make(chan struct{})} // writes 1 and 2 wait on these
	l, err := New(db, failpointsOption{failpoints{groupWrite: func(n int) {
		mu.Lock()
		sizes = append(sizes, n)
		nth := len(sizes)
		mu.Unlock()
		if nth <= len(gates) {
			held <- nth
			<-gates[nth-1]
		}
	}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	var opened [2]sync.Once
	open := func(i int) { opened[i].Do(func() { close(gates[i]) }) }
	t.Cleanup(func() { open(0); open(1) }) // before Close: a failed test must not leave writes held
	g := &groupWrites{l: l}
	// waitedOn returns a Txn that has staged a write to key while another Lock waits for it.
	waitedOn := func(key string) (*Txn, <-chan lockResult) {
		txn := l.Begin() // no Rollback on failure: it would wait for a Commit held in its fence
		_, err := txn.Lock(ctx, []byte(key), Options{Lease: time.Minute})
		require.NoError(t, err)
		require.NoError(t, txn.Put([]byte(key), []byte("v")))
		successor := lockAsync(ctx, l, []byte(key), Options{Timeout: time.Minute})
		WaitQueued(t, l, []byte(key), 1)
		return txn, successor
	}
	commitAsync := func(txn *Txn) <-chan error {
		done := make(chan error, 1)
		go func() { done <- txn.Commit() }()
		return done
	}

	first := g.commit(t, TxnOptions{}, "first", "v")
	require.Equal(t, 1, testutil.Await(t, held, "the queue's write"))
	bypasser, succ1 := waitedOn("hot1")
	bypass := commitAsync(bypasser)
	require.Equal(t, 2, testutil.Await(t, held, "the bypass, beside the queue's write"))
	open(0)
	require.NoError(t, testutil.Await(t, first, "the queue's write"))

	other := l.Begin()
	_, err = other.LockCF(ctx, cfs[0], []byte("k"), Options{Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, other.PutCF(cfs[0], []byte("k"), []byte("v")))
	unmergeable := commitAsync(other)
	require.Eventually(t, func() bool { return g.queued() == 1 }, testutil.Guard, 200*time.Microsecond,
		"the unmergeable batch parks while a bypass is in flight")
	late, succ2 := waitedOn("hot2")
	lateDone := commitAsync(late)
	require.Eventually(t, func() bool { return g.queued() == 2 }, testutil.Guard, 200*time.Microsecond,
		"a waited-on commit parks behind the unmergeable batch")

	open(1)
	for _, done := range []<-chan error{bypass, unmergeable, lateDone} {
		require.NoError(t, testutil.Await(t, done, "Commit"))
	}
	for _, succ := range []<-chan lockResult{succ1, succ2} {
		got := testutil.Await(t, succ, "the successor's grant")
		require.NoError(t, got.err)
		assert.True(t, got.h.Release())
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []int{1, 1, 1, 1}, sizes)
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	v, err := db.GetCF(ro, cfs[0], []byte("k"))
	require.NoError(t, err)
	defer v.Free()
	assert.Equal(t, "v", string(v.Data()), "the unmergeable batch landed")
}
