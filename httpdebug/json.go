package httpdebug

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"io"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/recordlock/recordlock"
)

// The JSON document: the Go field names of Stats, LockInfo and WaitInfo in lower camel case,
// initialisms kept, a lock's heldFor and a wait's columnFamily besides; durations in integer
// nanoseconds, times in RFC 3339 (UTC, to the nanosecond), a scope as "node" or "cluster", a key
// as keyText gives it.

type jsonDocument struct {
	TakenAt   string         `json:"takenAt"`
	Databases []jsonDatabase `json:"databases"`
}

type jsonDatabase struct {
	Name         string     `json:"name"`
	Stats        jsonStats  `json:"stats"`
	Locks        []jsonLock `json:"locks"`
	Waits        []jsonWait `json:"waits"`
	LocksOmitted int        `json:"locksOmitted"`
	WaitsOmitted int        `json:"waitsOmitted"`
}

type jsonStats struct {
	Held         int    `json:"held"`
	Waiting      int    `json:"waiting"`
	Acquired     uint64 `json:"acquired"`
	Contended    uint64 `json:"contended"`
	WaitTime     int64  `json:"waitTime"`
	Timeouts     uint64 `json:"timeouts"`
	Canceled     uint64 `json:"canceled"`
	Deadlocks    uint64 `json:"deadlocks"`
	Lapsed       uint64 `json:"lapsed"`
	Revoked      uint64 `json:"revoked"`
	Fenced       uint64 `json:"fenced"`
	HookFailures uint64 `json:"hookFailures"`
}

type jsonLock struct {
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

type jsonWait struct {
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

func writeJSON(w io.Writer, taken time.Time, dbs []database) error {
	doc := jsonDocument{TakenAt: timeText(taken), Databases: make([]jsonDatabase, len(dbs))}
	for i, d := range dbs {
		s := d.stats
		jd := jsonDatabase{
			Name: d.name,
			Stats: jsonStats{
				Held: s.Held, Waiting: s.Waiting, Acquired: s.Acquired, Contended: s.Contended,
				WaitTime: int64(s.WaitTime), Timeouts: s.Timeouts, Canceled: s.Canceled,
				Deadlocks: s.Deadlocks, Lapsed: s.Lapsed, Revoked: s.Revoked, Fenced: s.Fenced,
				HookFailures: s.HookFailures,
			},
			Locks:        make([]jsonLock, len(d.locks)),
			Waits:        make([]jsonWait, len(d.waits)),
			LocksOmitted: d.locksOmitted,
			WaitsOmitted: d.waitsOmitted,
		}
		for j, l := range d.locks {
			jd.Locks[j] = jsonLock{
				Key:            keyText(l.Key),
				ColumnFamily:   l.ColumnFamily,
				ColumnFamilyID: l.ColumnFamilyID,
				Scope:          scopeText(l.Scope),
				Owner:          l.Owner,
				Hold:           l.Hold,
				AcquiredAt:     timeText(l.AcquiredAt.Time()),
				ExpiresAt:      timeText(l.ExpiresAt),
				Remaining:      int64(l.Remaining),
				HeldFor:        int64(heldFor(taken, l.AcquiredAt)),
				Waiters:        l.Waiters,
				Token:          l.Token,
				Shared:         l.Shared,
				IsRange:        l.IsRange,
				RangeEnd:       rangeEndText(l.RangeEnd),
			}
		}
		for j, wt := range d.waits {
			jd.Waits[j] = jsonWait{
				Key:            keyText(wt.Key),
				ColumnFamily:   d.families[wt.ColumnFamilyID],
				ColumnFamilyID: wt.ColumnFamilyID,
				Owner:          wt.Owner,
				Shared:         wt.Shared,
				Upgrade:        wt.Upgrade,
				Waited:         int64(wt.Waited),
				IsRange:        wt.IsRange,
				RangeEnd:       rangeEndText(wt.RangeEnd),
			}
		}
		doc.Databases[i] = jd
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// keyText is how the page and the JSON show a key: its text when it is valid UTF-8 without
// control characters, else 0x and its bytes in hex.
func keyText(key []byte) string {
	if utf8.Valid(key) && !bytes.ContainsFunc(key, unicode.IsControl) {
		return string(key)
	}
	return "0x" + hex.EncodeToString(key)
}

// rangeEndText is a range's End as the JSON shows it: as keyText gives it, or null for none (a
// lock of one key, or a range with no upper bound; isRange tells them apart).
func rangeEndText(end []byte) *string {
	if end == nil {
		return nil
	}
	s := keyText(end)
	return &s
}

// lockText is how the page shows what a lock or request is for: its key, or for a range
// "[start, end)", with "∞" for no upper bound (an empty start shows as nothing: "[, b)").
func lockText(key []byte, isRange bool, end []byte) string {
	if !isRange {
		return keyText(key)
	}
	e := "∞"
	if end != nil {
		e = keyText(end)
	}
	return "[" + keyText(key) + ", " + e + ")"
}

// scopeText names a lock's resolved scope.
func scopeText(s recordlock.Scope) string {
	if s == recordlock.ScopeCluster {
		return "cluster"
	}
	return "node"
}

// heldFor is how long a holder acquired at acquired has held its lock when the page is taken:
// 0 for an acquired later, a cluster round's TsR minted on a clock ahead of this one.
func heldFor(taken time.Time, acquired recordlock.Timestamp) time.Duration {
	return max(0, taken.Sub(acquired.Time()))
}

func timeText(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
