package httpdebug_test

import (
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
