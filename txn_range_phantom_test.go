package recordlock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// A Txn that holds a range, shared or exclusive, and counts it, keeps every insert and delete in
// the range waiting until it commits: the count it commits is the count of the range when it
// lands. Ordered by the table's own queue (Locker.Waits), on a ManualClock: no sleeps, no timing.
func TestTxnRangeHoldsOffPhantoms(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shared bool
		key    string // the key the writer flips
		delete bool   // the writer deletes key (present before), else it inserts it
		after  int    // the keys of the range once the writer commits
	}{
		{name: "shared/insert", shared: true, key: "p/2", after: 3},
		{name: "shared/delete", shared: true, key: "p/1", delete: true, after: 1},
		{name: "exclusive/insert", key: "p/2", after: 3},
		{name: "exclusive/delete", key: "p/1", delete: true, after: 1},
		{name: "shared/insert at the start", shared: true, key: "p/", after: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openDB(t)
			dbPut(t, db, "p/1", "v")
			dbPut(t, db, "p/3", "v")
			dbPut(t, db, "p0", "v") // outside Prefix("p/"): never counted
			_, l := manual(t, db)
			ctx := context.Background()
			r := recordlock.Prefix([]byte("p/"))

			counter := txnNamed(t, l, "counter")
			_, err := counter.LockRange(ctx, r, recordlock.Options{Shared: tc.shared})
			require.NoError(t, err)
			require.Equal(t, 2, scanCount(t, counter, r))

			writer := txnNamed(t, l, "writer")
			locked := txnLockAsync(t, writer, []byte(tc.key), wait)
			testutil.WaitUntil(t, "the writer's lock queues behind the range", func() bool { return waitsOf(l, "writer") == 1 || len(locked) > 0 })
			select {
			case res := <-locked:
				t.Fatalf("the writer locked %q inside a range another Txn holds (err %v): a phantom can land", tc.key, res.err)
			default:
			}

			commitCount(t, counter, "count", 2)
			granted(t, locked, "the writer's lock once the counter committed")
			if tc.delete {
				require.NoError(t, writer.Delete([]byte(tc.key)))
			} else {
				require.NoError(t, writer.Put([]byte(tc.key), []byte("v")))
			}
			require.NoError(t, writer.Commit())

			assert.Equal(t, "2", string(dbGet(t, db, "count")), "the count committed while the writer waited")
			next := txnNamed(t, l, "next")
			_, err = next.LockRange(ctx, r, recordlock.Options{Shared: true})
			require.NoError(t, err)
			assert.Equal(t, tc.after, scanCount(t, next, r), "the count after the writer's commit")
		})
	}
}

// The other order: a Txn that holds a key of the range, with an insert staged, keeps a range
// lock over it waiting until it commits, so the count sees the insert.
func TestTxnRangeWaitsForAnInsertInside(t *testing.T) {
	db := openDB(t)
	dbPut(t, db, "p/1", "v")
	_, l := manual(t, db)
	ctx := context.Background()
	r := recordlock.Prefix([]byte("p/"))

	writer := txnNamed(t, l, "writer")
	_, err := writer.Lock(ctx, []byte("p/2"), wait)
	require.NoError(t, err)
	require.NoError(t, writer.Put([]byte("p/2"), []byte("v")))

	counter := txnNamed(t, l, "counter")
	locked := make(chan error, 1)
	testutil.Go(t, ctx, func(ctx context.Context) {
		_, err := counter.LockRange(ctx, r, recordlock.Options{Shared: true, Timeout: wait.Timeout})
		locked <- err
	})
	testutil.WaitUntil(t, "the range queues behind the key", func() bool { return waitsOf(l, "counter") == 1 || len(locked) > 0 })
	select {
	case err := <-locked:
		t.Fatalf("the counter locked the range over a key another Txn holds (err %v)", err)
	default:
	}

	require.NoError(t, writer.Commit())
	require.NoError(t, testutil.Await(t, locked, "the counter's range once the writer committed"))
	assert.Equal(t, 2, scanCount(t, counter, r), "the count sees the insert it waited for")
	commitCount(t, counter, "count", 2)
	assert.Equal(t, "2", string(dbGet(t, db, "count")))
}

// The stress test's invariant over many Txns at once, under -race: every committed count of the
// prefix equals its keys when the count's commit landed, as the log replays it.
func TestStressNoPhantomUnderSharedRange(t *testing.T) {
	db, run := runPhantomWorkload(t, phantomWorkload{counters: 4, counts: 200, mutators: 4})
	rep, err := replayPhantoms(db)
	require.NoError(t, err)
	assert.Equal(t, run.counts, rep.counts, "counts in the log vs counts committed")
	assert.Equal(t, run.mutations, rep.mutations, "mutations in the log vs mutations committed")
	assert.Positive(t, rep.mutations, "the mutators committed nothing: nothing was tested")
	t.Logf("checked %d counts against %d mutations, in log order (%d deadlocks retried)", rep.counts, rep.mutations, run.deadlocks)
}

// The same workload with the range conflict check off must break the invariant, and the oracle
// must say so: the stress test can fail. A run can be lucky (every count commits before a
// mutation lands), so it tries up to phantomAttempts runs.
func TestStressPhantomCaughtWithoutRangeConflicts(t *testing.T) {
	const phantomAttempts = 5
	for i := range phantomAttempts {
		db, _ := runPhantomWorkload(t, phantomWorkload{counters: 4, counts: 200, mutators: 4}, recordlock.WithoutRangeConflicts())
		_, err := replayPhantoms(db)
		var pe *phantomError
		if errors.As(err, &pe) {
			t.Logf("run %d of at most %d: %v", i+1, phantomAttempts, err)
			return
		}
		require.NoError(t, err, "an error of the replay that is not a phantom")
	}
	t.Fatalf("%d runs with the range conflict check off and no phantom seen: the oracle or the workload is blind", phantomAttempts)
}

// scanCount returns the number of keys txn's Scan of r sees.
func scanCount(t testing.TB, txn *recordlock.Txn, r recordlock.Range) int {
	t.Helper()
	n := 0
	require.NoError(t, txn.Scan(r, func(_, _ []byte) error { n++; return nil }))
	return n
}

// commitCount writes n under key in txn, which locks key, and commits.
func commitCount(t testing.TB, txn *recordlock.Txn, key string, n int) {
	t.Helper()
	_, err := txn.Lock(context.Background(), []byte(key), wait)
	require.NoError(t, err)
	require.NoError(t, txn.Put([]byte(key), []byte(strconv.Itoa(n))))
	require.NoError(t, txn.Commit())
}

// waitsOf counts the requests of the Txn named owner queued in l's table.
func waitsOf(l *recordlock.Locker, owner string) int {
	n := 0
	for w := range l.Waits() {
		if w.Owner == owner {
			n++
		}
	}
	return n
}
