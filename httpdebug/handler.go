// Package httpdebug serves a read-only page about the locks of one or more databases, to mount
// under /debug/ as net/http/pprof is. It shows when it was taken and, for each database, the
// figures of Locker.Stats, the keys held (Locker.Locks) and for how long, the requests waiting
// for them (Locker.Waits) and the wait-for graph of their owners, naming each record's column
// family by its name and ID, and reloads itself every 2 seconds. With ?format=json it serves
// the same figures as JSON; ?format=html, like no format, serves the page.
//
//	http.Handle("/debug/recordlock/", httpdebug.Handler(map[string]*recordlock.Locker{"orders": locker}))
//
// The output is bounded: at most 1,000 holders and 1,000 waits per database (?limit=N lowers
// it), with the number left out. Past the limit the longest waits are kept, and the holders of
// the keys they wait for, and of the ranges over those keys, are listed first, so that the graph
// keeps their edges (a waiting range's holders of keys inside it that no key request waits for
// are not among them); other holders fill the remaining rows in no particular order. Rows are shown sorted by column family and key. Reading
// a database takes each of its table's shards' mutexes only to copy rows, as Locks and Waits do,
// and does not copy every holder of a database that holds millions.
//
// The JSON is {"takenAt","databases":[{"name","stats","locks","waits","locksOmitted",
// "waitsOmitted"}]}, databases sorted by name. The fields of stats, of each lock and of each wait
// are those of recordlock.Stats, LockInfo and WaitInfo in lower camel case, initialisms kept
// (columnFamilyID), and two more: a lock's heldFor, takenAt less its acquiredAt (0 if that is
// later: a cluster round's TsR minted on another clock), and a wait's columnFamily, the name of
// its family as the holders read give it ("" when none of that family was read: its key is being
// handed over, or past the limit its holders were left out). Durations are integer nanoseconds,
// times RFC 3339 in UTC, a scope "node" or "cluster", and a key is its text when it is valid
// UTF-8 without control characters, else 0x and its bytes in hex (so a text key that starts with
// 0x reads like a binary one).
//
// takenAt, on the page and in the JSON, is a recordlock.Timestamp minted on the first
// database's Locker (by name) once every database was read: the server's wall clock unless
// recordlock.WithClock gave the Locker another. On one database it is later than the acquiredAt
// of every node lock read, as that database's timestamps strictly increase.
//
// In the graph a Txn is one node, named by its TxnOptions.Name: two Txns with the same name are
// drawn as one, and a Txn without a name is drawn as a lock outside any Txn, which is a node of
// its own per holder and per waiter, named by its key.
//
// Keys and Txn names are user data: the page escapes them everywhere, sends a
// Content-Security-Policy that allows no script, and itself runs none.
package httpdebug

import (
	"bytes"
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/recordlock/recordlock"
)

const (
	// maxLimit is the most holders, and the most waits, shown per database.
	maxLimit = 1000
	// refreshSeconds is how often the page reloads itself.
	refreshSeconds = 2
)

// contentSecurityPolicy lets the page use its own inline style and nothing else: no script, no
// request to anywhere (the icon is an empty data: URL, so the browser asks for no favicon).
const contentSecurityPolicy = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// handler serves the page of its databases, sorted by name.
type handler struct {
	dbs []namedLocker
}

type namedLocker struct {
	name string
	l    *recordlock.Locker
}

// Handler returns a read-only http.Handler that serves the locks of dbs, which maps a name
// shown on the page to a Locker of each database. It answers GET and HEAD at any path it is
// mounted on, and any other method with 405 Method Not Allowed. Query parameters:
//
//   - format=html (the default): the HTML page.
//   - format=json: the JSON document instead of the HTML page.
//   - limit=N: at most N holders and N waits per database, 1 ≤ N ≤ 1000 (default 1000).
//
// Any other value of format or limit, or either parameter given twice, is a 400 Bad Request. Handler copies dbs, so later changes
// to the map do not reach it. It panics if a Locker in dbs is nil.
func Handler(dbs map[string]*recordlock.Locker) http.Handler {
	h := &handler{dbs: make([]namedLocker, 0, len(dbs))}
	for name, l := range dbs {
		if l == nil {
			panic(fmt.Sprintf("httpdebug: the Locker of database %q is nil", name))
		}
		h.dbs = append(h.dbs, namedLocker{name, l})
	}
	slices.SortFunc(h.dbs, func(a, b namedLocker) int { return cmp.Compare(a.name, b.name) })
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "httpdebug: the page is read-only; use GET or HEAD", http.StatusMethodNotAllowed)
		return
	}
	asJSON, limit, err := parseQuery(r.URL.RawQuery)
	if err != nil {
		http.Error(w, "httpdebug: "+err.Error(), http.StatusBadRequest)
		return
	}
	dbs := make([]database, len(h.dbs))
	for i, d := range h.dbs {
		dbs[i] = read(d.name, d.l, limit)
	}
	taken := h.takenAt()
	var body bytes.Buffer
	if asJSON {
		err = writeJSON(&body, taken, dbs)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
	} else {
		err = writePage(&body, taken, dbs, limit)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", contentSecurityPolicy)
	}
	if err != nil {
		w.Header().Del("Content-Security-Policy")
		http.Error(w, "httpdebug: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(body.Len()))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = body.WriteTo(w) // a client that went away is no error of ours
}

// takenAt is when the page is taken, read once its databases were (see the package doc): with
// no database, on the system clock.
func (h *handler) takenAt() time.Time {
	if len(h.dbs) == 0 {
		return recordlock.SystemClock().Now()
	}
	return h.dbs[0].l.Timestamp().Time()
}

// parseQuery reads the format and limit parameters; other parameters are ignored.
func parseQuery(raw string) (asJSON bool, limit int, err error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return false, 0, fmt.Errorf("malformed query: %w", err)
	}
	limit = maxLimit
	switch v := q["format"]; {
	case len(v) == 0 || (len(v) == 1 && v[0] == "html"):
	case len(v) == 1 && v[0] == "json":
		asJSON = true
	default:
		return false, 0, fmt.Errorf("format must be json or html, got %q", v)
	}
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if len(v) != 1 || err != nil || n < 1 || n > maxLimit {
			return false, 0, fmt.Errorf("limit must be one integer from 1 to %d, got %q", maxLimit, v)
		}
		limit = n
	}
	return asJSON, limit, nil
}
