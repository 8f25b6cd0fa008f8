package recordlock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

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
	l, err := New(db, WithClock(g.clk), testHooksOption{testHooks{groupWrite: func(n int) {
		g.mu.Lock()
		g.sizes = append(g.sizes, n)
		first := len(g.sizes) == 1
		g.mu.Unlock()
		switch {
		case first:
			close(g.held)
			<-g.gate
		case n > 1:
			// A Txn told its batch was written before the write was made would read its
			// key back before it lands (commit checks) while the write is held up here.
			time.Sleep(20 * time.Millisecond)
		}
	}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
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

// holdFirst commits key=value and returns once its write is in flight, held until release.
func (g *groupWrites) holdFirst(t *testing.T, key, value string) <-chan error {
	t.Helper()
	done := g.commit(t, TxnOptions{}, key, value)
	Await(t, g.held, "the first commit's write")
	return done
}

// queue commits key=value with opts and returns once that commit waits in the queue, behind n-1
// others.
func (g *groupWrites) queue(t *testing.T, opts TxnOptions, key, value string, n int) <-chan error {
	t.Helper()
	done := g.commit(t, opts, key, value)
	require.Eventually(t, func() bool { return g.queued() == n }, txnTestGuard, 200*time.Microsecond,
		"waiting for %d queued commits", n)
	return done
}

func (g *groupWrites) queued() int {
	q := &g.l.commits
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

func (g *groupWrites) release() { close(g.gate) }

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
	require.NoError(t, Await(t, first, "Commit"))
	for _, done := range queued {
		require.NoError(t, Await(t, done, "Commit"))
	}
	assert.Equal(t, []int{1, 5}, g.writes(), "the five queued commits share one write")
	for i := range 5 {
		assert.Equal(t, fmt.Sprint("v", i), string(DBGet(t, db, fmt.Sprint("k", i))))
	}
	assert.Zero(t, g.queued())
	assert.True(t, g.l.tab.Empty(), "every lock was released")
}

// A group write that fails fails every Txn it carries: none is told its write landed. RocksDB
// fails a batch with a column family the database does not have (here through a handle of
// another database, which the Locker cannot tell apart from one of its own).
func TestGroupWriteFailureFailsEveryTxnInIt(t *testing.T) {
	db, _ := tempdb.NewCF(t, "a")                // a is ID 1
	_, foreign := tempdb.NewCF(t, "x", "y", "a") // a is ID 3, which db does not have
	g := newGroupWrites(t, db)
	first := g.holdFirst(t, "first", "v")
	good1 := g.queue(t, TxnOptions{}, "good1", "v1", 1)

	bad := g.l.Begin()
	defer bad.Rollback()
	_, err := bad.LockCF(context.Background(), foreign[2], []byte("bad"), Options{Lease: time.Minute})
	require.NoError(t, err, "the handle passes the Locker's checks")
	require.NoError(t, bad.PutCF(foreign[2], []byte("bad"), []byte("v")))
	badDone := make(chan error, 1)
	go func() { badDone <- bad.Commit() }()
	require.Eventually(t, func() bool { return g.queued() == 2 }, txnTestGuard, 200*time.Microsecond)
	good2 := g.queue(t, TxnOptions{}, "good2", "v2", 3)

	g.release()
	require.NoError(t, Await(t, first, "Commit"))
	for name, done := range map[string]<-chan error{"good1": good1, "bad": badDone, "good2": good2} {
		err := Await(t, done, "Commit")
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "recordlock: commit: Invalid argument", name)
	}
	assert.Equal(t, []int{1, 3}, g.writes())
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
	require.NoError(t, Await(t, first, "Commit"))
	for _, done := range queued {
		require.NoError(t, Await(t, done, "Commit"))
	}
	// Sync leads and takes the other Sync; then the two plain ones; then DisableWAL alone.
	assert.Equal(t, []int{1, 2, 2, 1}, g.writes())
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
	require.NoError(t, Await(t, first, "Commit"))
	for _, done := range queued {
		require.NoError(t, Await(t, done, "Commit"))
	}
	// Each group: its leader, then two more, after which the bound is passed.
	assert.Equal(t, []int{1, 3, 2}, g.writes())
	for i := range 5 {
		assert.Len(t, DBGet(t, db, fmt.Sprint("k", i)), len(big))
	}
}

// A commit waiting in the queue is inside its fences: its lease lapsing while it waits neither
// stops its write nor lets a successor take the key before the write has landed.
func TestQueuedCommitStaysFenced(t *testing.T) {
	db := tempdb.New(t)
	g := newGroupWrites(t, db)
	other := newTestLocker(t, db, g.clk)
	ctx := context.Background()
	first := g.holdFirst(t, "first", "v")

	txn := g.l.Begin()
	defer txn.Rollback()
	h, err := txn.Lock(ctx, []byte("k"), Options{Lease: time.Second})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("k"), []byte("queued")))
	done := make(chan error, 1)
	go func() { done <- txn.Commit() }()
	require.Eventually(t, func() bool { return g.queued() == 1 }, txnTestGuard, 200*time.Microsecond)

	successor := lockAsync(ctx, other, []byte("k"), Options{Timeout: time.Minute})
	WaitQueued(t, g.l, []byte("k"), 1)

	g.clk.Advance(2 * time.Second) // the lease lapses while the commit waits for its write
	assert.True(t, h.IsLeaseExpired())
	_, err = other.TryLock([]byte("k"), Options{})
	require.ErrorIs(t, err, ErrLocked, "the key must not pass on while the commit waits")
	select {
	case got := <-successor:
		t.Fatalf("the successor acquired while the commit waited: %+v", got)
	default:
	}

	g.release()
	require.NoError(t, Await(t, first, "Commit"))
	require.NoError(t, Await(t, done, "Commit"), "a commit that entered its fences in time lands")
	got := Await(t, successor, "the successor's grant after the commit")
	require.NoError(t, got.err)
	assert.Equal(t, "queued", string(DBGet(t, db, "k")), "the successor reads the queued commit's write")
	assert.True(t, got.h.Release())
}
