package httpdebug_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/internal/tempdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// epoch is the wall reading every ManualClock in these tests starts at.
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// openDB opens a fresh RocksDB in a temp dir, with one more column family, "index"; both are
// closed at the end of the test.
func openDB(t testing.TB) (*grocksdb.DB, *grocksdb.ColumnFamilyHandle) {
	db, cfs := tempdb.NewCF(t, "index")
	return db, cfs[0]
}

// manual returns a ManualClock and a Locker on db that runs on it, closed at the end of the test.
func manual(t testing.TB, db *grocksdb.DB) (*recordlock.ManualClock, *recordlock.Locker) {
	t.Helper()
	clk := recordlock.NewManualClock(epoch)
	l, err := recordlock.New(db, recordlock.WithClock(clk))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return clk, l
}

// txnNamed begins a Txn with the given name, rolled back at the end of the test.
func txnNamed(t testing.TB, l *recordlock.Locker, name string) *recordlock.Txn {
	t.Helper()
	txn, err := l.BeginTx(recordlock.TxnOptions{Name: name})
	require.NoError(t, err)
	t.Cleanup(txn.Rollback)
	return txn
}

// waitFor starts lock in a goroutine, waits until l lists n requests, and returns where lock's
// error arrives. The handle lock gets, if any, is for lock to keep or release.
func waitFor(t testing.TB, l *recordlock.Locker, n int, lock func() error) <-chan error {
	t.Helper()
	c := make(chan error, 1)
	go func() { c <- lock() }()
	require.Eventually(t, func() bool { return countWaits(l) == n }, 10*time.Second, time.Millisecond,
		"waiting for %d queued requests", n)
	return c
}

// done waits for the error of a lock started with waitFor; one that never returns fails the test.
func done(t testing.TB, c <-chan error) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the lock did not return")
		return nil
	}
}

func countWaits(l *recordlock.Locker) int {
	n := 0
	for range l.Waits() {
		n++
	}
	return n
}

// get requests target from h and returns the status, the headers and the body.
func get(t testing.TB, h http.Handler, method, target string) (int, http.Header, string) {
	t.Helper()
	req := httptest.NewRequestWithContext(context.Background(), method, target, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body, err := io.ReadAll(rec.Result().Body)
	require.NoError(t, err)
	return rec.Code, rec.Result().Header, string(body)
}

// getJSON requests target from h, which must answer 200 with JSON, and decodes it.
func getJSON(t testing.TB, h http.Handler, target string) document {
	t.Helper()
	code, hdr, body := get(t, h, http.MethodGet, target)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "application/json; charset=utf-8", hdr.Get("Content-Type"))
	var doc document
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&doc))
	return doc
}
