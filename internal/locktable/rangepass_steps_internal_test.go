//go:build invariants

package locktable

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of cost bounds, counted in steps that the table counts only in a build with the tag
// invariants (internal/invariants): they are built with it alone.

// txnLockAsync starts txn's Lock of key in a goroutine that rolls txn back as soon as it returns,
// and sends its error to errs.
func txnLockAsync(txn *testTxn, key string, o testOptions, errs chan<- error) {
	go func() {
		_, err := txn.Lock(context.Background(), []byte(key), o)
		txn.Rollback()
		errs <- err
	}()
}

// repassCounts reads, under the home shard's mutex, how many key requests repass has moved in l's
// table and how many it asked whether they could.
func repassCounts(l *testLocker) (moved, tried uint64) {
	sh, _ := (&modelRun{tab: l.tab}).rangeSpaceLocked()
	defer sh.mu.Unlock()
	return sh.counts.repassed.Load(), sh.counts.repassTried.Load()
}

// repassMoves sets up k writers that hold b shared and queue for d, held by a request of no
// owner, behind a Txn's request for d, which is itself behind a reader's range over [c, e); then a
// Txn that holds c5 (so the reader waits for it) asks for b. That one new wait makes the reader,
// and through it the request for d ahead of the writers, wait for every writer: each writer's
// request now passes it and is moved ahead of it. It returns the moves and the requests asked
// about for that one wait.
func repassMoves(t *testing.T, k int) (moved, tried uint64) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
	ctx := context.Background()
	errs := make(chan error, k+3)
	d, err := l.TryLock([]byte("d"), testOptions{})
	require.NoError(t, err)
	v := &testTxn{l: l, name: "v"}
	_, err = v.Lock(ctx, []byte("c5"), testOptions{})
	require.NoError(t, err)
	writers := make([]*testTxn, k)
	for i := range writers {
		writers[i] = &testTxn{l: l, name: fmt.Sprint("w", i)}
		_, err := writers[i].Lock(ctx, []byte("b"), testOptions{Shared: true})
		require.NoError(t, err)
	}
	reader := &testTxn{l: l, name: "reader"}
	go func() {
		h, err := l.acquireRange(ctx, []byte("c"), []byte("e"), testOptions{Shared: true, Timeout: time.Minute}, reader, true)
		if err == nil {
			reader.claims = append(reader.claims, h)
		}
		reader.Rollback()
		errs <- err
	}()
	waitRangesQueued(t, l, 1)
	txnLockAsync(&testTxn{l: l, name: "ahead"}, "d", testOptions{Timeout: time.Minute}, errs)
	WaitQueued(t, l, []byte("d"), 1)
	for i, w := range writers {
		txnLockAsync(w, "d", testOptions{Timeout: time.Minute}, errs)
		WaitQueued(t, l, []byte("d"), 2+i)
	}
	movedBefore, triedBefore := repassCounts(l)
	require.Zero(t, movedBefore, "no writer passes the request ahead before v waits")

	txnLockAsync(v, "b", testOptions{Timeout: time.Minute}, errs)
	WaitQueued(t, l, []byte("b"), 1)
	moved, tried = repassCounts(l)
	moved, tried = moved-movedBefore, tried-triedBefore

	// d goes to the writers in turn, then b to v, the range to the reader, and d to the request
	// the writers passed.
	require.True(t, d.Release())
	for range k + 3 {
		require.NoError(t, testutil.Await(t, errs, "a queued request"))
	}
	assert.True(t, ProbeTableEmpty(l))
	return moved, tried
}

// repass moves each waiting request at most once per new wait (rangepass.go): one wait that lets
// k writers pass the request they queued behind moves each of them once, k moves in all.
func TestRepassMovesEachRequestOncePerWait(t *testing.T) {
	for _, k := range []int{2, 4, 8} {
		moved, tried := repassMoves(t, k)
		t.Logf("k = %d writers: %d moves, %d requests asked about", k, moved, tried)
		assert.Equal(t, uint64(k), moved, "every writer passes the request ahead of it, once")
		// Each pass over the waiting requests asks each that has not moved, until one moves.
		assert.LessOrEqual(t, tried, uint64(k*(k+1)), "at most k requests asked per move, and a last pass")
	}
}
