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
