package httpdebug_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/httpdebug"
)

// A range lock or request is shown on the page as [start, end), or [start, ∞) with no upper
// bound, and in the JSON by isRange and rangeEnd (null with no bound, and for a key); a wait is
// joined to the holders whose keys or ranges meet it, in the table and in the graph.
func TestRangesShown(t *testing.T) {
	db, _ := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	ranger := txnNamed(t, l, "ranger")
	_, err := ranger.LockRange(ctx, recordlock.Range{Start: []byte("a"), End: []byte("c")}, recordlock.Options{})
	require.NoError(t, err)
	unbounded, err := l.LockRange(ctx, recordlock.Range{Start: []byte("m")}, recordlock.Options{Shared: true})
	require.NoError(t, err)
	keyer := txnNamed(t, l, "keyer")
	keyWaits := waitFor(t, l, 1, func() error { _, err := keyer.Lock(ctx, []byte("b"), recordlock.Options{}); return err })
	rangeWaits := waitFor(t, l, 2, func() error {
		h, err := l.LockRange(ctx, recordlock.Range{Start: []byte("bb"), End: []byte("n")}, recordlock.Options{Timeout: time.Minute})
		if err == nil {
			h.Release()
		}
		return err
	})
	h := httpdebug.Handler(map[string]*recordlock.Locker{"orders": l})

	_, _, page := get(t, h, http.MethodGet, "/")
	locks := section(t, page, `<table class="locks">`, "</table>")
	assert.Contains(t, locks, ">[a, c)</td>")
	assert.Contains(t, locks, ">[m, ∞)</td>")
	waits := section(t, page, `<table class="waits">`, "</table>")
	assert.Contains(t, waits, ">[bb, n)</td>")
	assert.Contains(t, waits, ">b</td>")
	// Who waits for whom joins a wait to the holders whose keys or ranges meet it.
	assert.Contains(t, waits, "<td>ranger</td></tr>", "b waits for the range [a, c)")
	assert.Contains(t, waits, "<td>ranger, a lock outside any Txn</td></tr>", "[bb, n) waits for [a, c) and [m, ∞)")
	assert.NotContains(t, waits, "holder not listed")
	svg := section(t, page, "<svg", "</svg>")
	assert.Equal(t, 2, strings.Count(svg, `<g class="edge">`), "an edge per wait")
	assert.Equal(t, 0, strings.Count(svg, `<g class="node key">`), "every wait's holder is found")
	assert.Contains(t, svg, "<title>Txn keyer waits for Txn ranger on key b</title>")
	assert.Contains(t, svg, "<title>a Lock outside any Txn waits for Txn ranger and 1 other holders on range [bb, n)</title>")

	d := getJSON(t, h, "/?format=json").Databases[0]
	end := func(s string) *string { return &s }
	a, m := lockDocOf(d.Locks, "a"), lockDocOf(d.Locks, "m")
	assert.True(t, a.IsRange)
	assert.Equal(t, end("c"), a.RangeEnd)
	assert.Equal(t, "ranger", a.Owner)
	assert.True(t, m.IsRange)
	assert.Nil(t, m.RangeEnd, "no upper bound")
	require.Len(t, d.Waits, 2)
	for _, w := range d.Waits {
		switch w.Key {
		case "b":
			assert.False(t, w.IsRange)
			assert.Nil(t, w.RangeEnd)
		case "bb":
			assert.True(t, w.IsRange)
			assert.Equal(t, end("n"), w.RangeEnd)
		default:
			t.Errorf("unexpected wait %+v", w)
		}
	}

	ranger.Rollback()
	require.NoError(t, done(t, keyWaits))
	keyer.Rollback()
	require.True(t, unbounded.Release())
	require.NoError(t, done(t, rangeWaits))
}

// Past the limit, the holders the kept waits wait for are listed first even when one is a range
// over the key waited for, so that the graph still joins the wait to its holder. (The range is in
// a column family other than the default one, whose key holders Locks may yield first.)
func TestLimitListsRangeHolderFirst(t *testing.T) {
	db, cf := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	for i := range 20 {
		_, err := l.TryLock(fmt.Appendf(nil, "z%02d", i), recordlock.Options{})
		require.NoError(t, err)
	}
	ranger := txnNamed(t, l, "ranger")
	_, err := ranger.LockRangeCF(ctx, cf, recordlock.Range{Start: []byte("a"), End: []byte("c")}, recordlock.Options{})
	require.NoError(t, err)
	waits := waitFor(t, l, 1, func() error {
		h, err := l.LockCF(ctx, cf, []byte("b"), recordlock.Options{})
		if err == nil {
			h.Release()
		}
		return err
	})
	h := httpdebug.Handler(map[string]*recordlock.Locker{"orders": l})

	d := getJSON(t, h, "/?format=json&limit=1").Databases[0]
	require.Len(t, d.Locks, 1)
	assert.Equal(t, "a", d.Locks[0].Key, "the range over b, which the wait waits for")
	assert.True(t, d.Locks[0].IsRange)
	assert.Equal(t, cf.ID(), d.Locks[0].ColumnFamilyID)
	assert.Equal(t, 20, *d.LocksOmitted)
	_, _, page := get(t, h, http.MethodGet, "/?limit=1")
	svg := section(t, page, "<svg", "</svg>")
	assert.Equal(t, 0, strings.Count(svg, `<g class="node key">`), "the wait's holder is listed")
	assert.Contains(t, svg, "<title>a Lock outside any Txn waits for Txn ranger on key b in column family")

	ranger.Rollback()
	require.NoError(t, done(t, waits))
}
