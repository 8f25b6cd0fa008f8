package httpdebug_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/httpdebug"
)

// A shared request queued behind a waiting exclusive request waits for that request first: the
// waits table says so, as the graph draws it, instead of naming the holders it does not conflict
// with (or none, when the only holder is a shared range over the key).
func TestWaitsTableNamesTheExclusiveRequestAhead(t *testing.T) {
	for _, c := range []struct {
		name, writer, ahead string
		hold                func(*recordlock.Txn) error
	}{
		{"key held shared", "writer", "queued behind writer", func(txn *recordlock.Txn) error {
			_, err := txn.Lock(context.Background(), []byte("b"), recordlock.Options{Shared: true})
			return err
		}},
		{"shared range over the key", "writer", "queued behind writer", func(txn *recordlock.Txn) error {
			_, err := txn.LockRange(context.Background(), recordlock.Range{Start: []byte("a"), End: []byte("c")}, recordlock.Options{Shared: true})
			return err
		}},
		{"exclusive request outside any Txn", "", "queued behind a Lock outside any Txn", func(txn *recordlock.Txn) error {
			_, err := txn.Lock(context.Background(), []byte("b"), recordlock.Options{Shared: true})
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, _ := openDB(t)
			_, l := manual(t, db)
			ctx := context.Background()
			reader := txnNamed(t, l, "reader")
			require.NoError(t, c.hold(reader))
			writer := txnNamed(t, l, c.writer)
			writerDone := waitFor(t, l, 1, func() error {
				if c.writer == "" {
					h, err := l.Lock(ctx, []byte("b"), recordlock.Options{})
					if err == nil {
						h.Release()
					}
					return err
				}
				_, err := writer.Lock(ctx, []byte("b"), recordlock.Options{})
				return err
			})
			sharer := txnNamed(t, l, "sharer")
			sharerDone := waitFor(t, l, 2, func() error {
				_, err := sharer.Lock(ctx, []byte("b"), recordlock.Options{Shared: true})
				return err
			})

			h := httpdebug.Handler(map[string]*recordlock.Locker{"orders": l})
			code, _, page := get(t, h, http.MethodGet, "/")
			require.Equal(t, http.StatusOK, code)
			require.NotContains(t, page, "not listed.", "nothing is omitted")
			waits := section(t, page, `<table class="waits">`, "</table>")
			assert.Contains(t, waits, "<td>shared</td><td class=\"owner\">sharer</td>")
			assert.Contains(t, waits, "<td>"+c.ahead+"</td></tr>", "the shared request names the request ahead of it")
			assert.NotContains(t, waits, "holder not listed")

			reader.Rollback()
			require.NoError(t, done(t, writerDone))
			writer.Rollback()
			require.NoError(t, done(t, sharerDone))
		})
	}
}
