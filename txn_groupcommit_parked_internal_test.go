package recordlock

import (
	"context"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/internal/tempdb"
)

// A Txn's parked mark follows the queue's waiting list, which the waited-on call reads instead of
// scanning the list: set while its commit waits there, cleared when it leaves to write beside
// the queue (hurried), to lead the next write, or as a member of the group it leads.
func TestParkedMarkFollowsTheWaitingList(t *testing.T) {
	db := tempdb.New(t)
	g := newGroupWrites(t, db)
	first := g.holdFirst(t, "first", "v")
	ctx := context.Background()
	keys := []string{"a", "b", "c"}
	txns := make([]*Txn, len(keys))
	dones := make([]<-chan error, len(keys))
	for i, key := range keys {
		txn := g.l.Begin()
		_, err := txn.Lock(ctx, []byte(key), Options{Lease: time.Minute})
		require.NoError(t, err)
		require.NoError(t, txn.Put([]byte(key), []byte("v")))
		done := make(chan error, 1)
		go func() { done <- txn.Commit() }()
		require.Eventually(t, func() bool { return g.queued() == i+1 }, testutil.Guard, 200*time.Microsecond,
			"waiting for the commit of %s to park", key)
		txns[i], dones[i] = txn, done
	}
	parked := func() []bool {
		q := &g.l.commits
		q.mu.Lock()
		defer q.mu.Unlock()
		return []bool{txns[0].parked, txns[1].parked, txns[2].parked}
	}
	assert.Equal(t, []bool{true, true, true}, parked(), "all three wait in the queue")

	successor := lockAsync(ctx, g.l, []byte("b"), Options{Timeout: time.Minute})
	require.NoError(t, testutil.Await(t, dones[1], "b's Commit, hurried by the request for its key"))
	assert.Equal(t, []bool{true, false, true}, parked(), "b left the list to write beside the queue")
	got := testutil.Await(t, successor, "the grant of b")
	require.NoError(t, got.err)
	assert.True(t, got.h.Release())

	g.release()
	require.NoError(t, testutil.Await(t, first, "the first Commit"))
	require.NoError(t, testutil.Await(t, dones[0], "a's Commit, which leads"))
	require.NoError(t, testutil.Await(t, dones[2], "c's Commit, in a's group"))
	assert.Equal(t, []bool{false, false, false}, parked())
	assert.Equal(t, []int{1, 1, 2}, g.writes(), "the held write, b's beside it, then a and c as one")
}
