package recordlock

// The key-lock table's door (docs/DESIGN.md §2.1): the process-wide registry of one
// locktable.Table per database, found by its canonical path, shared by every Locker of it and
// dropped when the last of them closes, and the state of the database that outlives its table.

import (
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/recordlock/recordlock/internal/locktable"
)

// database is what the process keeps of one database for as long as it runs, beyond the life of
// any table: its timestamps keep increasing when its last Locker closes and a new one opens after
// the wall clock stepped back, and a coordinator removed without declaring the database
// standalone keeps its locks failing closed.
type database struct {
	stamps   locktable.Stamps
	coord    coordinatorSlot
	families familyNames
	txns     txnIDs
	// clusterDeadlocks counts the requests a coordinator failed as the victims of cycles across
	// nodes; Stats.Deadlocks adds them to the table's.
	clusterDeadlocks atomic.Uint64
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
