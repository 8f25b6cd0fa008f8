package httpdebug_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/httpdebug"
)

// The JSON document as the package doc gives it; decoding it with DisallowUnknownFields fails on any
// field the schema does not name.
type document struct {
	TakenAt   string `json:"takenAt"`
	Databases []struct {
		Name         string         `json:"name"`
		Stats        map[string]int `json:"stats"`
		Locks        []lockDoc      `json:"locks"`
		Waits        []waitDoc      `json:"waits"`
		LocksOmitted *int           `json:"locksOmitted"`
		WaitsOmitted *int           `json:"waitsOmitted"`
	} `json:"databases"`
}

type lockDoc struct {
	Key            string  `json:"key"`
	ColumnFamily   string  `json:"columnFamily"`
	ColumnFamilyID uint32  `json:"columnFamilyID"`
	Scope          string  `json:"scope"`
	Owner          string  `json:"owner"`
	Hold           bool    `json:"hold"`
	AcquiredAt     string  `json:"acquiredAt"`
	ExpiresAt      string  `json:"expiresAt"`
	Remaining      int64   `json:"remaining"`
	HeldFor        int64   `json:"heldFor"`
	Waiters        int     `json:"waiters"`
	Token          uint64  `json:"token"`
	Shared         bool    `json:"shared"`
	IsRange        bool    `json:"isRange"`
	RangeEnd       *string `json:"rangeEnd"`
}

type waitDoc struct {
	Key            string  `json:"key"`
	ColumnFamily   string  `json:"columnFamily"`
	ColumnFamilyID uint32  `json:"columnFamilyID"`
	Owner          string  `json:"owner"`
	Shared         bool    `json:"shared"`
	Upgrade        bool    `json:"upgrade"`
	Waited         int64   `json:"waited"`
	IsRange        bool    `json:"isRange"`
	RangeEnd       *string `json:"rangeEnd"`
}

// lowerCamel is the JSON name the package doc gives a Go field: its first letter in lower case (every
// field of Stats, LockInfo and WaitInfo starts with one capital, and initialisms inside stay).
func lowerCamel(name string) string { return string(unicode.ToLower(rune(name[0]))) + name[1:] }

// fieldNames lists the JSON names of every field of the struct type of v.
func fieldNames(v any) []string {
	var names []string
	for f := range reflect.TypeOf(v).Fields() {
		names = append(names, lowerCamel(f.Name))
	}
	slices.Sort(names)
	return names
}

func keysOf(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

// sortedWith returns names with more added, sorted.
func sortedWith(names []string, more ...string) []string {
	return slices.Sorted(slices.Values(append(slices.Clone(names), more...)))
}

// The JSON names every field of Stats, LockInfo and WaitInfo, a lock's heldFor, a wait's
// columnFamily and when it was taken, and nothing else, with durations in integer nanoseconds,
// times in RFC 3339, scopes by name and exact values for a known table.
func TestJSONSchemaAndValues(t *testing.T) {
	db, cf := openDB(t)
	clk, l := manual(t, db)
	ctx := context.Background()
	plain, err := l.TryLock([]byte("plain"), recordlock.Options{Lease: 10 * time.Second})
	require.NoError(t, err)
	cluster, err := l.TryLock([]byte("cluster"), recordlock.Options{Lease: 10 * time.Second})
	require.NoError(t, err)
	require.True(t, cluster.JoinClusterRound(recordlock.Timestamp(clk.Now().UnixNano()), 10*time.Second, clk.Mono(), func() error { return nil }))
	held, err := l.TryLockCF(cf, []byte("idx"), recordlock.Options{Hold: true, Lease: 10 * time.Second})
	require.NoError(t, err)
	alpha := txnNamed(t, l, "alpha")
	row, err := alpha.Lock(ctx, []byte("row"), recordlock.Options{Lease: 10 * time.Second})
	require.NoError(t, err)
	beta := txnNamed(t, l, "beta")
	betaWaits := waitFor(t, l, 1, func() error { _, err := beta.Lock(ctx, []byte("row"), recordlock.Options{}); return err })
	plainWaits := waitFor(t, l, 2, func() error {
		h, err := l.Lock(ctx, []byte("plain"), recordlock.Options{})
		if err == nil {
			h.Release()
		}
		return err
	})
	clk.Advance(3 * time.Second)
	h := httpdebug.Handler(map[string]*recordlock.Locker{"orders": l})

	// The field names, from the raw document.
	_, _, body := get(t, h, http.MethodGet, "/?format=json")
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &raw))
	assert.Equal(t, []string{"databases", "takenAt"}, keysOf(raw))
	require.Len(t, raw["databases"], 1)
	rawDB := raw["databases"].([]any)[0].(map[string]any)
	assert.Equal(t, []string{"locks", "locksOmitted", "name", "stats", "waits", "waitsOmitted"}, keysOf(rawDB))
	assert.Equal(t, fieldNames(recordlock.Stats{}), keysOf(rawDB["stats"].(map[string]any)))
	for _, lock := range rawDB["locks"].([]any) {
		assert.Equal(t, sortedWith(fieldNames(recordlock.LockInfo{}), "heldFor"), keysOf(lock.(map[string]any)))
	}
	for _, wait := range rawDB["waits"].([]any) {
		assert.Equal(t, sortedWith(fieldNames(recordlock.WaitInfo{}), "columnFamily"), keysOf(wait.(map[string]any)))
	}
	assert.Contains(t, body, `"columnFamilyID": `)

	// The values.
	doc := getJSON(t, h, "/?format=json")
	require.Len(t, doc.Databases, 1)
	d := doc.Databases[0]
	assert.Equal(t, "orders", d.Name)
	require.NotNil(t, d.LocksOmitted)
	require.NotNil(t, d.WaitsOmitted)
	assert.Zero(t, *d.LocksOmitted)
	assert.Zero(t, *d.WaitsOmitted)
	s := l.Stats()
	assert.Equal(t, map[string]int{
		"held": 4, "waiting": 2, "acquired": 4, "contended": 0, "waitTime": 0, "timeouts": 0, "canceled": 0,
		"deadlocks": 0, "lapsed": 0, "revoked": 0, "fenced": 0, "hookFailures": 0,
	}, d.Stats)
	assert.Equal(t, s.Held, d.Stats["held"])

	rfc := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	taken, err := time.Parse(time.RFC3339Nano, doc.TakenAt)
	require.NoError(t, err)
	assert.False(t, taken.Before(clk.Now()), "taken at %s, on the Locker's clock", doc.TakenAt)
	since := func(h *recordlock.Handle) int64 { return int64(taken.Sub(h.AcquiredAt().Time())) }
	assert.Equal(t, []lockDoc{
		{Key: "cluster", ColumnFamily: "default", Scope: "cluster", AcquiredAt: rfc(cluster.AcquiredAt().Time()), ExpiresAt: rfc(cluster.ExpiresAt()), Remaining: int64(7 * time.Second), HeldFor: since(cluster)},
		{Key: "plain", ColumnFamily: "default", Scope: "node", AcquiredAt: rfc(plain.AcquiredAt().Time()), ExpiresAt: rfc(plain.ExpiresAt()), Remaining: int64(7 * time.Second), HeldFor: since(plain), Waiters: 1},
		{Key: "row", ColumnFamily: "default", Scope: "node", Owner: "alpha", AcquiredAt: rfc(row.AcquiredAt().Time()), ExpiresAt: rfc(row.ExpiresAt()), Remaining: int64(7 * time.Second), HeldFor: since(row), Waiters: 1},
		{Key: "idx", ColumnFamily: "index", ColumnFamilyID: cf.ID(), Scope: "node", Hold: true, AcquiredAt: rfc(held.AcquiredAt().Time()), ExpiresAt: rfc(held.ExpiresAt()), Remaining: int64(7 * time.Second), HeldFor: since(held)},
	}, d.Locks, "sorted by column family and key")
	for _, lock := range d.Locks {
		_, err := time.Parse(time.RFC3339, lock.AcquiredAt)
		assert.NoError(t, err, "RFC 3339")
	}
	assert.Equal(t, []waitDoc{
		{Key: "plain", ColumnFamily: "default", Waited: int64(3 * time.Second)},
		{Key: "row", ColumnFamily: "default", Owner: "beta", Waited: int64(3 * time.Second)},
	}, d.Waits)

	require.True(t, plain.Release())
	require.NoError(t, done(t, plainWaits))
	alpha.Rollback()
	require.NoError(t, done(t, betaWaits))
}

// A key is its text when it is valid UTF-8 without control characters, else 0x and its hex, in
// the JSON and on the page, for holders and waits alike.
func TestKeysAsTextOrHex(t *testing.T) {
	db, _ := openDB(t)
	clk, l := manual(t, db)
	keys := map[string]string{
		"café":              "café",
		"<b>bold</b>":       "<b>bold</b>",
		"tab\tkey":          "0x746162096b6579",
		"\x00\xff":          "0x00ff",
		"\xff":              "0xff",
		"next\u0085line":    "0x6e657874c2856c696e65", // U+0085 is a C1 control character
		"bell\x07":          "0x62656c6c07",
		"del\x7f":           "0x64656c7f",
		"日本":                "日本",
		"0x-looking but ok": "0x-looking but ok",
	}
	for key := range keys {
		_, err := l.TryLock([]byte(key), recordlock.Options{})
		require.NoError(t, err)
	}
	waits := waitFor(t, l, 1, func() error {
		_, err := l.Lock(context.Background(), []byte("\x00\xff"), recordlock.Options{Timeout: 50 * time.Millisecond})
		return err
	})
	h := httpdebug.Handler(map[string]*recordlock.Locker{"db": l})
	doc := getJSON(t, h, "/?format=json")
	got := map[string]bool{}
	for _, lock := range doc.Databases[0].Locks {
		got[lock.Key] = true
	}
	want := map[string]bool{}
	for _, text := range keys {
		want[text] = true
	}
	assert.Equal(t, want, got)
	require.Len(t, doc.Databases[0].Waits, 1)
	assert.Equal(t, "0x00ff", doc.Databases[0].Waits[0].Key)

	_, _, page := get(t, h, http.MethodGet, "/")
	assert.Contains(t, page, `<td class="key">0x00ff</td>`)
	assert.Contains(t, page, `<td class="key">0x6e657874c2856c696e65</td>`)
	assert.Contains(t, page, `<td class="key">café</td>`)
	assert.NotContains(t, page, "\x00")
	assert.NotContains(t, page, "\u0085")
	clk.Advance(50 * time.Millisecond)
	require.ErrorIs(t, done(t, waits), recordlock.ErrTimeout)
}

// At most limit holders and limit waits per database: the longest waits, and the holders of
// the keys they wait for first; the rest are counted, in the JSON and on the page. A limit that
// is not one integer from 1 to 1000 is a 400, and changes nothing.
func TestLimits(t *testing.T) {
	db, _ := openDB(t)
	clk, l := manual(t, db)
	ctx := context.Background()
	for i := range 5 {
		_, err := l.TryLock(fmt.Appendf(nil, "k%d", i), recordlock.Options{})
		require.NoError(t, err)
	}
	var waiters []<-chan error
	for n := 1; n <= 3; n++ {
		waiters = append(waiters, waitFor(t, l, n, func() error {
			_, err := l.Lock(ctx, []byte("k3"), recordlock.Options{Timeout: 10 * time.Second})
			return err
		}))
		clk.Advance(time.Second)
	}
	h := httpdebug.Handler(map[string]*recordlock.Locker{"db": l})

	for _, target := range []string{"/?format=json", "/?format=json&limit=1000", "/?limit=5&format=json"} {
		d := getJSON(t, h, target).Databases[0]
		assert.Len(t, d.Locks, 5, target)
		assert.Len(t, d.Waits, 3, target)
		assert.Zero(t, *d.LocksOmitted, target)
		assert.Zero(t, *d.WaitsOmitted, target)
	}
	d := getJSON(t, h, "/?format=json&limit=1").Databases[0]
	require.Len(t, d.Locks, 1)
	assert.Equal(t, "k3", d.Locks[0].Key, "the holder of the key waited for comes first")
	assert.Equal(t, 4, *d.LocksOmitted)
	require.Len(t, d.Waits, 1)
	assert.Equal(t, int64(3*time.Second), d.Waits[0].Waited, "the longest wait")
	assert.Equal(t, 2, *d.WaitsOmitted)
	d = getJSON(t, h, "/?format=json&limit=3").Databases[0]
	require.Len(t, d.Locks, 3)
	assert.Contains(t, d.Locks, lockDocOf(d.Locks, "k3"))
	assert.Equal(t, 2, *d.LocksOmitted)
	assert.Len(t, d.Waits, 3)
	assert.Zero(t, *d.WaitsOmitted)

	code, _, page := get(t, h, http.MethodGet, "/?limit=1")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, page, "4 more holders not listed.")
	assert.Contains(t, page, "2 more waits not listed.")
	assert.Equal(t, 1, strings.Count(section(t, page, `<table class="locks">`, `</table>`), "<tr><td"))

	before, beforeStats := snapshot(l)
	for _, query := range []string{"limit=0", "limit=1001", "limit=abc", "limit=-1", "limit=", "limit=1.5",
		"limit=1&limit=2", "format=xml", "format=json&format=json", "limit=%zz", "format=json&limit=0"} {
		code, hdr, body := get(t, h, http.MethodGet, "/?"+query)
		assert.Equal(t, http.StatusBadRequest, code, query)
		assert.Contains(t, body, "httpdebug: ", query)
		assert.Equal(t, "text/plain; charset=utf-8", hdr.Get("Content-Type"), query)
	}
	after, afterStats := snapshot(l)
	assert.Equal(t, before, after, "a refused request changes no lock")
	assert.Equal(t, beforeStats, afterStats)

	for _, c := range waiters {
		clk.Advance(10 * time.Second)
		require.ErrorIs(t, done(t, c), recordlock.ErrTimeout)
	}
}

func lockDocOf(locks []lockDoc, key string) lockDoc {
	for _, l := range locks {
		if l.Key == key {
			return l
		}
	}
	return lockDoc{}
}

// snapshot is what a read-only request must leave as it was: the holders and waits, and the
// figures.
func snapshot(l *recordlock.Locker) ([]string, recordlock.Stats) {
	var rows []string
	for info := range l.Locks() {
		rows = append(rows, fmt.Sprintf("lock %d/%q %s %v %d %d %d", info.ColumnFamilyID, info.Key, info.Owner, info.Hold, info.AcquiredAt, info.Remaining, info.Waiters))
	}
	for w := range l.Waits() {
		rows = append(rows, fmt.Sprintf("wait %d/%q %s %d", w.ColumnFamilyID, w.Key, w.Owner, w.Waited))
	}
	slices.Sort(rows)
	return rows, l.Stats()
}

// section returns the part of page from the first start to the end that follows it.
func section(t testing.TB, page, start, end string) string {
	t.Helper()
	i := strings.Index(page, start)
	require.GreaterOrEqual(t, i, 0, "no %s in the page", start)
	j := strings.Index(page[i:], end)
	require.GreaterOrEqual(t, j, 0, "no %s after %s", end, start)
	return page[i : i+j+len(end)]
}

// Only GET and HEAD are served; any other method is a 405 naming them, and changes no lock.
func TestReadOnly(t *testing.T) {
	db, _ := openDB(t)
	clk, l := manual(t, db)
	a, err := l.TryLock([]byte("a"), recordlock.Options{})
	require.NoError(t, err)
	waits := waitFor(t, l, 1, func() error {
		_, err := l.Lock(context.Background(), []byte("a"), recordlock.Options{Timeout: time.Second})
		return err
	})
	h := httpdebug.Handler(map[string]*recordlock.Locker{"db": l})
	before, beforeStats := snapshot(l)
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions, "PURGE"} {
		for _, target := range []string{"/", "/?format=json", "/?limit=1"} {
			code, hdr, _ := get(t, h, method, target)
			assert.Equal(t, http.StatusMethodNotAllowed, code, method)
			assert.Equal(t, "GET, HEAD", hdr.Get("Allow"), method)
		}
	}
	after, afterStats := snapshot(l)
	assert.Equal(t, before, after)
	assert.Equal(t, beforeStats, afterStats)

	code, hdr, body := get(t, h, http.MethodHead, "/")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "text/html; charset=utf-8", hdr.Get("Content-Type"))
	assert.NotEmpty(t, hdr.Get("Content-Length"))
	assert.Empty(t, body, "HEAD has no body")
	code, hdr, body = get(t, h, http.MethodGet, "/")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, hdr.Get("Content-Security-Policy"), "default-src 'none'")
	assert.Equal(t, "nosniff", hdr.Get("X-Content-Type-Options"))
	assert.Contains(t, body, `<meta http-equiv="refresh" content="2">`)
	assert.NotContains(t, body, "<script", "the page runs no script")
	after, afterStats = snapshot(l)
	assert.Equal(t, before, after, "GET changes no lock either")
	assert.Equal(t, beforeStats, afterStats)

	clk.Advance(time.Second)
	require.ErrorIs(t, done(t, waits), recordlock.ErrTimeout)
	require.True(t, a.Release())
}

// Keys and owner names are shown as text, in the tables, the graph and the JSON: markup in them
// never becomes markup of the page, in element content or in an attribute.
func TestEscaping(t *testing.T) {
	db, _ := openDB(t)
	_, l := manual(t, db)
	ctx := context.Background()
	const (
		script   = `<script>alert(1)</script>`
		img      = `<img src=x onerror=alert(1)>`
		attr     = `" onmouseover="alert(1)`
		longAttr = attr + "................................................................................................................"
	)
	holder := txnNamed(t, l, script)
	_, err := holder.Lock(ctx, []byte(img), recordlock.Options{})
	require.NoError(t, err)
	_, err = l.TryLock([]byte(longAttr), recordlock.Options{})
	require.NoError(t, err)
	waiter := txnNamed(t, l, img)
	waits := waitFor(t, l, 1, func() error { _, err := waiter.Lock(ctx, []byte(img), recordlock.Options{}); return err })
	h := httpdebug.Handler(map[string]*recordlock.Locker{`<i>db</i>`: l})

	_, _, page := get(t, h, http.MethodGet, "/")
	for _, raw := range []string{script, img, "<i>", attr, `<script`, `<img`} {
		assert.NotContains(t, page, raw)
	}
	const (
		scriptText = `&lt;script&gt;alert(1)&lt;/script&gt;`
		imgText    = `&lt;img src=x onerror=alert(1)&gt;`
	)
	svg := section(t, page, "<svg", "</svg>")
	assert.Contains(t, svg, ">"+scriptText+"</text>", "the holder Txn's node")
	assert.Contains(t, svg, ">"+imgText+"</text>", "the waiter Txn's node")
	assert.Contains(t, svg, `<title>Txn `+scriptText+`</title>`)
	locks := section(t, page, `<table class="locks">`, "</table>")
	assert.Contains(t, locks, `<td class="owner">`+scriptText+`</td>`)
	assert.Contains(t, locks, `<td class="key">`+imgText+`</td>`)
	assert.Contains(t, locks, `title="&#34; onmouseover=&#34;alert(1)`)
	waitsTable := section(t, page, `<table class="waits">`, "</table>")
	assert.Contains(t, waitsTable, `<td class="owner">`+imgText+`</td>`)
	assert.Contains(t, waitsTable, `<td>`+scriptText+`</td>`, "waits for")
	assert.Contains(t, page, "<h2>&lt;i&gt;db&lt;/i&gt;</h2>")

	_, _, body := get(t, h, http.MethodGet, "/?format=json")
	assert.NotContains(t, body, "<")
	doc := getJSON(t, h, "/?format=json")
	d := doc.Databases[0]
	assert.Equal(t, "<i>db</i>", d.Name)
	assert.Equal(t, script, lockDocOf(d.Locks, img).Owner)
	require.Len(t, d.Waits, 1)
	assert.Equal(t, img, d.Waits[0].Owner)
	assert.Equal(t, img, d.Waits[0].Key)

	holder.Rollback()
	require.NoError(t, done(t, waits))
}

// The page lists every holder and wait, draws one edge per wait and a node per party, and a
// database of its own per name, in name order.
func TestPageListsRowsAndDrawsGraph(t *testing.T) {
	db, _ := openDB(t)
	clk, l := manual(t, db)
	other, _ := openDB(t)
	_, ol := manual(t, other)
	ctx := context.Background()
	a := txnNamed(t, l, "txn-a")
	_, err := a.Lock(ctx, []byte("x"), recordlock.Options{})
	require.NoError(t, err)
	_, err = l.TryLock([]byte("plain-1"), recordlock.Options{})
	require.NoError(t, err)
	_, err = l.TryLock([]byte("plain-2"), recordlock.Options{})
	require.NoError(t, err)
	_, err = ol.TryLock([]byte("elsewhere"), recordlock.Options{})
	require.NoError(t, err)
	b := txnNamed(t, l, "txn-b")
	var waits []<-chan error
	waits = append(waits, waitFor(t, l, 1, func() error { _, err := b.Lock(ctx, []byte("x"), recordlock.Options{}); return err }))
	for n, key := range []string{"plain-1", "plain-1", "plain-2"} {
		waits = append(waits, waitFor(t, l, n+2, func() error {
			_, err := l.Lock(ctx, []byte(key), recordlock.Options{Timeout: time.Second})
			return err
		}))
	}
	dbs := map[string]*recordlock.Locker{"zeta": l, "alpha": ol}
	h := httpdebug.Handler(dbs)
	delete(dbs, "zeta") // the handler keeps its own copy

	_, _, page := get(t, h, http.MethodGet, "/")
	alpha, zeta := strings.Index(page, "<h2>alpha</h2>"), strings.Index(page, "<h2>zeta</h2>")
	require.Positive(t, alpha)
	require.Greater(t, zeta, alpha, "databases in name order")
	zetaPart := page[zeta:]
	assert.Equal(t, 3, strings.Count(section(t, zetaPart, `<table class="locks">`, "</table>"), "<tr><td"))
	assert.Equal(t, 4, strings.Count(section(t, zetaPart, `<table class="waits">`, "</table>"), "<tr><td"))
	svg := section(t, zetaPart, "<svg", "</svg>")
	assert.Equal(t, 4, strings.Count(svg, `<g class="edge">`), "an edge per wait")
	assert.Equal(t, 2, strings.Count(svg, `<g class="node txn">`), "a node per Txn")
	assert.Equal(t, 2, strings.Count(svg, `<g class="node holder">`), "a node per plain holder, never one for both")
	assert.Equal(t, 3, strings.Count(svg, `<g class="node waiter">`), "a node per plain waiter")
	assert.Contains(t, svg, `marker-end="url(#arrow-1)"`, "the second database's marker")
	assert.Contains(t, page[alpha:zeta], "Nobody waits.")

	doc := getJSON(t, h, "/?format=json")
	require.Len(t, doc.Databases, 2)
	assert.Equal(t, "alpha", doc.Databases[0].Name)
	assert.Equal(t, "zeta", doc.Databases[1].Name)

	a.Rollback()
	require.NoError(t, done(t, waits[0]), "txn-b gets x")
	clk.Advance(time.Second)
	for _, c := range waits[1:] {
		require.ErrorIs(t, done(t, c), recordlock.ErrTimeout)
	}
}

// Handler refuses a nil Locker at once rather than failing on the first request.
func TestHandlerPanicsOnNilLocker(t *testing.T) {
	assert.PanicsWithValue(t, `httpdebug: the Locker of database "x" is nil`, func() {
		httpdebug.Handler(map[string]*recordlock.Locker{"x": nil})
	})
}

// A database holding many keys is listed up to the limit, with the rest counted, and the holder
// of a key somebody waits for is among those listed.
func TestManyKeys(t *testing.T) {
	db, _ := openDB(t)
	clk, l := manual(t, db)
	const n = 20000
	for i := range n {
		_, err := l.TryLock(fmt.Appendf(nil, "key-%05d", i), recordlock.Options{})
		require.NoError(t, err)
	}
	waits := waitFor(t, l, 1, func() error {
		_, err := l.Lock(context.Background(), []byte("key-12345"), recordlock.Options{Timeout: 10 * time.Millisecond})
		return err
	})
	h := httpdebug.Handler(map[string]*recordlock.Locker{"db": l})
	d := getJSON(t, h, "/?format=json").Databases[0]
	assert.Len(t, d.Locks, 1000)
	assert.Equal(t, n-1000, *d.LocksOmitted)
	assert.Equal(t, 1, lockDocOf(d.Locks, "key-12345").Waiters, "the holder waited for is listed")
	require.Len(t, d.Waits, 1)
	assert.Equal(t, n, d.Stats["held"])
	clk.Advance(10 * time.Millisecond)
	require.ErrorIs(t, done(t, waits), recordlock.ErrTimeout)
}
