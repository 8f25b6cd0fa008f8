package httpdebug_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/httpdebug"
)

// The page stays bounded whatever the shape of the waits: 1,000 sharers of a key and 1,000
// requests queued for it, both within the default limits, render as a page under 1 MB with one
// edge per wait. Drawing an edge per pair of a wait and a sharer made it 271 MB.
func TestPageBoundedBySharersAndWaiters(t *testing.T) {
	const sharers, queued = 1000, 1000
	db, _ := openDB(t)
	_, l := manual(t, db)
	key := []byte("hot")
	for range sharers {
		_, err := l.Lock(t.Context(), key, recordlock.Options{Shared: true, Lease: time.Minute})
		require.NoError(t, err)
	}
	results := make(chan error, queued)
	for range queued {
		go func() {
			_, err := l.Lock(t.Context(), key, recordlock.Options{Timeout: time.Minute})
			results <- err
		}()
	}
	require.Eventually(t, func() bool { return countWaits(l) == queued }, 30*time.Second, time.Millisecond)

	h := httpdebug.Handler(map[string]*recordlock.Locker{"db": l})
	status, _, body := get(t, h, http.MethodGet, "/")
	require.Equal(t, http.StatusOK, status)
	assert.Less(t, len(body), 1<<20, "the page is %d bytes", len(body))
	doc := getJSON(t, h, "/?format=json")
	require.Len(t, doc.Databases, 1)
	assert.Len(t, doc.Databases[0].Locks, sharers)
	assert.Len(t, doc.Databases[0].Waits, queued)

	require.NoError(t, l.Close()) // fails the waiters, which would wait on the ManualClock forever
	for range queued {
		require.ErrorIs(t, done(t, results), recordlock.ErrClosed)
	}
}

// On real Lockers: a Txn holds k, a writer queues for it, then a reader. The page draws the
// reader waiting for the writer ahead of it, which is what it waits for, and the writer waiting
// for the holder. The reader runs on a second Locker of the database whose clock has moved
// further, so it has waited longer by its clock than the writer ahead of it: the graph follows
// the queue, not the times waited.
func TestGraphDrawsTheQueue(t *testing.T) {
	db, _ := openDB(t)
	clk, l := manual(t, db)
	readerClk, readerLocker := manual(t, db)
	ctx := context.Background()
	key := []byte("k")
	holder := txnNamed(t, l, "holder")
	_, err := holder.Lock(ctx, key, recordlock.Options{})
	require.NoError(t, err)
	writer, reader := txnNamed(t, l, "writer"), txnNamed(t, readerLocker, "reader")
	opts := recordlock.Options{Timeout: time.Second}
	wrote := waitFor(t, l, 1, func() error { _, err := writer.Lock(ctx, key, opts); return err })
	shared := opts
	shared.Shared = true
	read := waitFor(t, l, 2, func() error { _, err := reader.Lock(ctx, key, shared); return err })
	readerClk.Advance(500 * time.Millisecond)

	code, _, page := get(t, httpdebug.Handler(map[string]*recordlock.Locker{"db": l}), http.MethodGet, "/")
	require.Equal(t, http.StatusOK, code)
	svg := section(t, page, "<svg", "</svg>")
	assert.Contains(t, svg, "<title>Txn writer waits for Txn holder on key k</title>")
	assert.Contains(t, svg, "<title>Txn reader waits for Txn writer on key k</title>")
	assert.NotContains(t, svg, "<title>Txn reader waits for Txn holder on key k</title>")

	clk.Advance(time.Second)
	require.ErrorIs(t, done(t, wrote), recordlock.ErrTimeout)
	readerClk.Advance(500 * time.Millisecond)
	require.ErrorIs(t, done(t, read), recordlock.ErrTimeout)
}
