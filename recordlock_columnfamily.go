package recordlock

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/linxGnu/grocksdb"
)

// Column family handles of another database. A handle belongs to the database that opened or
// created it, but RocksDB's C API cannot say which one, nor which family of a database has a given
// ID: a write batch carries only the ID, so a handle of another database would write into this
// database's family of the same ID (or fail only at Commit if it has none: RocksDB then applies the
// batch in part and refuses every later write), and a read would go to the other database. What
// this database can tell, by reading its MANIFEST
// (grocksdb.ListColumnFamilies on its path), is the names of its families in the order of their
// IDs; and its default family is ID 0, named "default". So a handle is refused when
//
//   - its name is not a family of this database (listed again once, for a family created since),
//   - it pairs ID 0 with another name, or "default" with another ID, or
//   - its ID is below its name's position in that order: IDs are unique and increase along it, so
//     the n-th family's ID is at least n (dropped families leave gaps, so it may be more).
//
// None of these refuses a handle of a live family of this database. A handle of another
// database whose family bears a name of this one and an ID at least its position passes: only
// Commit can find, and only when no family here has that ID, that it does not fit.

// maxKnownFamilies bounds the handles a Locker remembers as checked; past it, a handle is checked
// on every use.
const maxKnownFamilies = 16

// columnFamilies is what a Locker knows of its database's column families.
type columnFamilies struct {
	known atomic.Pointer[[]knownFamily] // handles that passed the check; never modified in place

	mu      sync.Mutex // guards the rest, and writes to known
	listed  []string   // the families in ID order, as last listed; nil before the first listing
	listErr error      // why the last listing failed; then only the default family is checked

	names *familyNames // the database's, shared by its Lockers
}

// familyNames names every column family of a database a handle of which passed a Locker's
// check: a cluster lock asks the coordinator by name, since nodes' databases share names, not
// IDs, and Locks shows it.
type familyNames struct {
	mu   sync.Mutex
	byID map[uint32]string
}

// name returns the name of the family with ID id. Every lock of a family other than the default
// one checks its handle first, so a family that holds a lock is named.
func (f *familyNames) name(id uint32) string {
	if id == 0 {
		return "default"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byID[id]
}

func (f *familyNames) add(id uint32, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byID == nil {
		f.byID = map[uint32]string{}
	}
	f.byID[id] = name
}

type knownFamily struct {
	cf *grocksdb.ColumnFamilyHandle
	id uint32
}

// columnFamily returns the ID of cf, 0 for nil (the default column family), or an error matching
// ErrInvalidOptions when cf cannot be a family of this Locker's database.
func (l *Locker) columnFamily(cf *grocksdb.ColumnFamilyHandle) (uint32, error) {
	if cf == nil {
		return 0, nil
	}
	if k := l.cfs.known.Load(); k != nil {
		for _, f := range *k {
			if f.cf == cf {
				return f.id, nil
			}
		}
	}
	return l.cfs.check(l.db, cf)
}

// check checks a handle not known yet, and remembers it if it passes.
func (c *columnFamilies) check(db *grocksdb.DB, cf *grocksdb.ColumnFamilyHandle) (uint32, error) {
	id, name := cf.ID(), cf.Name()
	if (id == 0) != (name == "default") {
		return 0, fmt.Errorf("%w: column family %q has ID %d, but ID 0 is the default family", ErrInvalidOptions, name, id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if id != 0 {
		pos := slices.Index(c.listed, name)
		if pos < 0 {
			c.list(db)
			pos = slices.Index(c.listed, name)
		}
		switch {
		case c.listErr != nil:
			// The families cannot be listed (a database on another Env): nothing more to tell.
		case pos < 0:
			return 0, fmt.Errorf("%w: column family %q is not a family of this database", ErrInvalidOptions, name)
		case int(id) < pos:
			return 0, fmt.Errorf("%w: column family %q has ID %d, lower than this database's family of that name can have", ErrInvalidOptions, name, id)
		}
	}
	c.names.add(id, name)
	var known []knownFamily
	if k := c.known.Load(); k != nil {
		known = *k
	}
	if len(known) < maxKnownFamilies {
		known = append(slices.Clip(known), knownFamily{cf: cf, id: id})
		c.known.Store(&known)
	}
	return id, nil
}

// list reads the names of the database's families, in ID order, from its MANIFEST. A MANIFEST
// replaced between reading its name and opening it fails the read, so it is tried twice.
func (c *columnFamilies) list(db *grocksdb.DB) {
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	for range 2 {
		c.listed, c.listErr = grocksdb.ListColumnFamilies(opts, db.Name())
		if c.listErr == nil {
			return
		}
	}
}
