package recordlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/tempdb"
)

// assertOutcome checks Commit's outcome contract for one Txn whose write of want reads back as
// got (nil when the key is missing): nil means it landed, an error matching ErrCommitAmbiguous
// allows either, any other error means it did not land.
func assertOutcome(t *testing.T, what string, err error, got []byte, want string) {
	t.Helper()
	switch {
	case err == nil:
		assert.Equal(t, want, string(got), "%s: Commit returned nil, so its write must be there", what)
	case errors.Is(err, ErrCommitAmbiguous):
	default:
		assert.Nil(t, got, "%s: Commit failed with %v, which says nothing landed, yet its write is there", what, err)
	}
}

// A batch writing a column family dropped while its Txn was open cannot land, and RocksDB logs
// it and applies it in part before it fails it. Thirty-two innocent Txns commit beside it, all
// queued behind one write; each Commit's outcome must be true of its write as read at once and
// after the database is reopened (which replays the log). The doomed batch is not merged with
// the others: they land in one write and are told so, and the doomed one, whose default-family
// write the reopened database holds, is told its outcome is unknown.
func TestDroppedFamilyBatchFailsAloneInItsGroup(t *testing.T) {
	dir := t.TempDir()
	opts := tempdb.Options()
	defer opts.Destroy()
	db, cfs, err := grocksdb.OpenDbColumnFamilies(opts, dir, []string{"default", "doomed"},
		[]*grocksdb.Options{opts, opts})
	require.NoError(t, err)
	g := newGroupWrites(t, db)
	ctx := context.Background()

	doomed := g.l.Begin()
	t.Cleanup(doomed.Rollback) // after the Commit's goroutine has ended (testutil.Go)
	_, err = doomed.LockCF(ctx, cfs[1], []byte("doomed"), Options{Lease: time.Minute})
	require.NoError(t, err)
	_, err = doomed.Lock(ctx, []byte("doomed:default"), Options{Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, doomed.Put([]byte("doomed:default"), []byte("v")))
	require.NoError(t, doomed.PutCF(cfs[1], []byte("doomed"), []byte("v")))
	require.NoError(t, db.DropColumnFamily(cfs[1]))

	const innocents = 32
	done := make([]<-chan error, innocents+1) // done[innocents] is the doomed Txn's
	done[0] = g.holdFirst(t, "innocent:00", "v00")
	queued := 0
	for i := 1; i < innocents; i++ {
		queued++
		done[i] = g.queue(t, TxnOptions{}, fmt.Sprintf("innocent:%02d", i), fmt.Sprintf("v%02d", i), queued)
		if i == innocents/2 { // the doomed Txn queues in the middle of the innocent ones
			doomedDone := make(chan error, 1)
			testutil.Go(t, ctx, func(context.Context) { doomedDone <- doomed.Commit() })
			t.Cleanup(g.release) // runs before the Commit is waited for: it may queue behind the held write
			queued++
			require.Eventually(t, func() bool { return g.queued() == queued }, testutil.Guard, 200*time.Microsecond)
			done[innocents] = doomedDone
		}
	}
	g.release()
	errs := make([]error, innocents+1)
	for i := range errs {
		errs[i] = testutil.Await(t, done[i], "Commit")
	}

	check := func(when string, db *grocksdb.DB) {
		for i := range innocents {
			key := fmt.Sprintf("innocent:%02d", i)
			assertOutcome(t, when+" "+key, errs[i], DBGet(t, db, key), fmt.Sprintf("v%02d", i))
		}
		assertOutcome(t, when+" the doomed Txn", errs[innocents], DBGet(t, db, "doomed:default"), "v")
	}
	check("at once:", db)
	require.NoError(t, g.l.Close())
	for _, cf := range cfs {
		cf.Destroy()
	}
	db.Close()
	db, err = grocksdb.OpenDb(opts, dir)
	require.NoError(t, err, "reopen")
	defer db.Close()
	check("after a reopen:", db)

	for i := range innocents {
		assert.NoError(t, errs[i], "a batch that cannot land fails only its own Txn, never innocent %d's landed write", i)
	}
	require.ErrorIs(t, errs[innocents], ErrCommitAmbiguous)
	assert.Contains(t, errs[innocents].Error(), "Invalid column family", "RocksDB's error is kept")
	assert.Equal(t, []int{1, innocents - 1, 1}, g.writes(), "the innocent queued Txns share one write; the doomed one writes alone")
	assert.Equal(t, "v", string(DBGet(t, db, "doomed:default")), "the log held the doomed batch, which makes its outcome ambiguous")
}

// A batch writing through a column family handle of another database, which the Locker cannot
// tell from one of its own, is written alone: the Txns queued around it share a write and land.
func TestForeignFamilyBatchWritesAlone(t *testing.T) {
	db, _ := tempdb.NewCF(t, "a")                // a is ID 1
	_, foreign := tempdb.NewCF(t, "x", "y", "a") // a is ID 3, which db does not have
	g := newGroupWrites(t, db)
	first := g.holdFirst(t, "first", "v")
	good1 := g.queue(t, TxnOptions{}, "good1", "v1", 1)

	bad := g.l.Begin()
	t.Cleanup(bad.Rollback) // after the Commit's goroutine has ended (testutil.Go)
	_, err := bad.LockCF(context.Background(), foreign[2], []byte("bad"), Options{Lease: time.Minute})
	require.NoError(t, err, "the handle passes the Locker's checks")
	require.NoError(t, bad.PutCF(foreign[2], []byte("bad"), []byte("v")))
	badDone := make(chan error, 1)
	testutil.Go(t, context.Background(), func(context.Context) { badDone <- bad.Commit() })
	t.Cleanup(g.release) // runs before the Commit is waited for: it may queue behind the held write
	require.Eventually(t, func() bool { return g.queued() == 2 }, testutil.Guard, 200*time.Microsecond)
	good2 := g.queue(t, TxnOptions{}, "good2", "v2", 3)

	g.release()
	require.NoError(t, testutil.Await(t, first, "Commit"))
	require.NoError(t, testutil.Await(t, good1, "Commit"), "good1 reads its write back")
	require.NoError(t, testutil.Await(t, good2, "Commit"), "good2 reads its write back")
	err = testutil.Await(t, badDone, "Commit")
	require.ErrorIs(t, err, ErrCommitAmbiguous)
	assert.Contains(t, err.Error(), "Invalid argument")
	assert.Equal(t, []int{1, 2, 1}, g.writes())
	assert.True(t, g.l.tab.Empty(), "every lock was released")
}

// A panic in the write path neither strands the commits queued behind the write nor leaves a
// group's members waiting: they are told their outcome is unknown, the lead passes on, and
// every fence ends.
func TestPanickingWriteHandsTheQueueOn(t *testing.T) {
	t.Run("a write of its own", func(t *testing.T) {
		g := newGroupWrites(t, tempdb.New(t))
		g.panicAt = 1
		first := g.holdFirst(t, "first", "v")
		queued := g.queue(t, TxnOptions{}, "queued", "v", 1)
		g.release()
		require.ErrorIs(t, testutil.Await(t, first, "Commit"), errCommitPanicked)
		require.NoError(t, testutil.Await(t, queued, "the queued Commit"), "the queued commit leads the next write")
		assert.True(t, g.l.tab.Empty(), "every lock was released")
	})
	t.Run("a group write", func(t *testing.T) {
		g := newGroupWrites(t, tempdb.New(t))
		g.panicAt = 2
		first := g.holdFirst(t, "first", "v")
		lead := g.queue(t, TxnOptions{}, "lead", "v", 1)
		members := []<-chan error{g.queue(t, TxnOptions{}, "m1", "v", 2), g.queue(t, TxnOptions{}, "m2", "v", 3)}
		g.release()
		require.NoError(t, testutil.Await(t, first, "Commit"))
		require.ErrorIs(t, testutil.Await(t, lead, "the leader's Commit"), errCommitPanicked)
		for _, m := range members {
			require.ErrorIs(t, testutil.Await(t, m, "a member's Commit"), ErrCommitAmbiguous,
				"each Txn of a group write is told its own outcome: a write that panicked may have landed")
		}
		require.NoError(t, testutil.Await(t, g.commit(t, TxnOptions{}, "later", "v"), "a later Commit"))
		assert.Equal(t, []int{1, 3, 1}, g.writes())
		assert.True(t, g.l.tab.Empty(), "every lock was released")
	})
}

// A Commit that checks no handle (only unlocked writes) holds no key for Close to wait on; Close
// still waits for its write, so no write of the Locker's Txns lands after Close has returned.
func TestCloseWaitsForUnlockedCommit(t *testing.T) {
	db := tempdb.New(t)
	entered, proceed := make(chan struct{}), make(chan struct{})
	l, err := New(db, failpointsOption{failpoints{inFence: func() {
		close(entered)
		<-proceed
	}}})
	require.NoError(t, err)
	txn, err := l.BeginTx(TxnOptions{AllowUnlockedWrites: true})
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte("k"), []byte("v")))
	committed := make(chan error, 1)
	go func() { committed <- txn.Commit() }()
	testutil.Await(t, entered, "the commit inside its write")

	closed := make(chan []byte, 1) // what k reads as the moment Close returns
	go func() {
		_ = l.Close()
		ro := grocksdb.NewDefaultReadOptions()
		defer ro.Destroy()
		got, _ := db.GetBytes(ro, []byte("k")) // a failed read leaves got nil, which fails below
		closed <- got
	}()
	// Close must wait for the write; a Close that did not has returned long before this.
	select {
	case got := <-closed:
		close(proceed)
		require.NoError(t, testutil.Await(t, committed, "Commit"))
		t.Fatalf("Close returned while a commit was about to write (k read %q)", got)
	case <-time.After(50 * time.Millisecond):
	}
	close(proceed)
	require.NoError(t, testutil.Await(t, committed, "Commit"))
	assert.Equal(t, "v", string(testutil.Await(t, closed, "Close")), "the write landed before Close returned")

	late, err := l.BeginTx(TxnOptions{AllowUnlockedWrites: true})
	require.NoError(t, err)
	require.ErrorIs(t, late.Put([]byte("late"), []byte("v")), ErrClosed)
	require.ErrorIs(t, late.Commit(), ErrClosed)
}
