package recordlock

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/recordlock/recordlock/internal/locktable"
)

// The door to the key-lock table, package locktable (docs/DESIGN.md §2): one table per database
// in the process, shared by every Locker of it, and what the API makes of the table's answers.

// database is what the process keeps of one database for as long as it runs, beyond the life of
// any table: its timestamps keep increasing when its last Locker closes and a new one opens after
// the wall clock stepped back, and a coordinator removed without declaring the database
// standalone keeps its locks failing closed.
type database struct {
	stamps locktable.Stamps
	coord  coordinatorSlot
}

// openTable is a table and the number of Lockers using it.
type openTable struct {
	tab  *locktable.Table
	refs int
}

// registry maps a database's canonical path to its table and its database state.
var registry = struct {
	sync.Mutex
	tables    map[string]*openTable
	databases map[string]*database
}{tables: map[string]*openTable{}, databases: map[string]*database{}}

// canonicalPath names a database so that two handles of it agree.
func canonicalPath(name string) string {
	p, err := filepath.Abs(name)
	if err != nil {
		return filepath.Clean(name)
	}
	if resolved, err := filepath.EvalSymlinks(p); err == nil {
		return resolved
	}
	return p
}

// acquireTable returns the table and the state of the database at path, creating the table on
// first use.
func acquireTable(path string) (*locktable.Table, *database) {
	registry.Lock()
	defer registry.Unlock()
	db := registry.databases[path]
	if db == nil {
		db = &database{}
		registry.databases[path] = db
	}
	t := registry.tables[path]
	if t == nil {
		t = &openTable{tab: locktable.New(path, &db.stamps)}
		registry.tables[path] = t
	}
	t.refs++
	return t.tab, db
}

// releaseTable drops one reference to the table of the database at path; the last one removes
// the table. Its timers were stopped as the clocks of its Lockers were dropped.
func releaseTable(path string) {
	registry.Lock()
	defer registry.Unlock()
	t := registry.tables[path]
	t.refs--
	if t.refs == 0 {
		delete(registry.tables, path)
	}
}

// tableClock is a Clock as the table reads it: the system clock itself, so that its hot path
// reads it without an indirection, or c behind an adapter.
func tableClock(c Clock) locktable.Clock {
	if _, ok := c.(*systemClock); ok {
		return locktable.System
	}
	return clockAdapter{c}
}

// clockAdapter gives the table a Clock of the API's.
type clockAdapter struct{ Clock }

func (a clockAdapter) AfterFunc(d time.Duration, f func()) locktable.Timer {
	return a.Clock.AfterFunc(d, f)
}

func (a clockAdapter) NowMono() (int64, time.Duration) { return readClock(a.Clock) }

// fromTable turns a refusal of the table into the API's error, and logs a deadlock's debug
// record; the table returns ctx errors as they are.
func (l *Locker) fromTable(h *Handle, err error) error {
	switch err {
	case nil:
		return nil
	case locktable.ErrClosed:
		return ErrClosed
	case locktable.ErrLocked:
		return ErrLocked
	case locktable.ErrTimeout:
		return ErrTimeout
	case locktable.ErrReleased:
		return ErrReleased
	case locktable.ErrLeaseExpired:
		return ErrLeaseExpired
	}
	var d *locktable.DeadlockError
	if errors.As(err, &d) {
		de := &DeadlockError{Cycle: make([]DeadlockWait, len(d.Cycle))}
		for i, w := range d.Cycle {
			de.Cycle[i] = DeadlockWait{Txn: w.Owner.Name(), ColumnFamilyID: w.CF, Key: w.Key}
		}
		l.logDeadlock(h, de, d.Waiters, d.HolderAge) // outside every mutex: the logger is the user's
		return de
	}
	return err
}

// logDeadlock writes a debug record of a deadlock found for h's request, with waiters the number of
// Lock calls queued for h's key and holderAge how long its holder had held it.
func (l *Locker) logDeadlock(h *Handle, err *DeadlockError, waiters int, holderAge time.Duration) {
	if !l.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	l.log.Debug("recordlock: deadlock", "db", l.path, "key", string(h.key()), "cf", h.cf(),
		"holder_age", holderAge, "waiters", waiters, "cycle", err.Error())
}
