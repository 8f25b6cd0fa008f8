package httpdebug_test

import (
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/httpdebug"
)

// cpuTime is the CPU time the process has used, user and system, garbage collection included.
// On a host shared with other work it measures a render better than the wall clock does.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// One render of the page, and of the JSON, for a database holding 1,000,000 keys, one of them
// with a waiter: the handler copies the waits and the holders they wait for, then holders from
// Locks until 1,000 rows are full, and never all million.
func BenchmarkRenderMillionKeys(b *testing.B) {
	db, _ := openDB(b)
	_, l := manual(b, db)
	const n = 1_000_000
	key := make([]byte, 8)
	for i := range n {
		binary.BigEndian.PutUint64(key, uint64(i))
		_, err := l.TryLock(key, recordlock.Options{})
		require.NoError(b, err)
	}
	binary.BigEndian.PutUint64(key, 12345)
	waits := waitFor(b, l, 1, func() error {
		_, err := l.Lock(b.Context(), key, recordlock.Options{})
		return err
	})
	h := httpdebug.Handler(map[string]*recordlock.Locker{"db": l})
	for _, bc := range []struct{ name, target string }{{"html", "/"}, {"json", "/?format=json"}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			req := httptest.NewRequest(http.MethodGet, bc.target, nil)
			start := cpuTime(b)
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatal(rec.Code)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
		})
	}
	b.StopTimer()
	require.NoError(b, l.Close()) // fails the waiter, which would otherwise wait on the ManualClock forever
	require.ErrorIs(b, done(b, waits), recordlock.ErrClosed)
}

// One render of the page for a key with 1,000 sharers and 1,000 requests queued for it, the
// most of each the page shows by default: it draws one edge per wait, not one per pair.
func BenchmarkRenderSharersAndQueue(b *testing.B) {
	const sharers, queued = 1000, 1000
	db, _ := openDB(b)
	_, l := manual(b, db)
	key := []byte("hot")
	for range sharers {
		if _, err := l.Lock(b.Context(), key, recordlock.Options{Shared: true, Lease: time.Minute}); err != nil {
			b.Fatal(err)
		}
	}
	errs := make(chan error, queued)
	for range queued {
		go func() {
			_, err := l.Lock(b.Context(), key, recordlock.Options{Timeout: time.Minute})
			errs <- err
		}()
	}
	require.Eventually(b, func() bool { return countWaits(l) == queued }, 30*time.Second, time.Millisecond)
	h := httpdebug.Handler(map[string]*recordlock.Locker{"db": l})
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	b.ReportAllocs()
	var size int
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(size), "page-bytes")
	b.StopTimer()
	require.NoError(b, l.Close()) // fails the waiters, which would wait on the ManualClock forever
	for range queued {
		<-errs
	}
}
