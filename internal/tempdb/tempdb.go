// Package tempdb opens the throwaway RocksDB databases that the tests and benchmarks of every
// module of the repository run on, all with the same settings: RocksDB's defaults.
//
// Tests use New and NewCF, which put the database in the test's temporary directory and close it
// when the test ends; OpenAt opens one in a directory the caller manages (a copy of a seed, a
// database reopened after a crash).
package tempdb

import (
	"testing"

	"github.com/linxGnu/grocksdb"
)

// Options returns the settings every database here is opened with: RocksDB's defaults, creating
// the database and the column families asked for when they are missing. The caller destroys
// them.
func Options() *grocksdb.Options {
	opts := grocksdb.NewDefaultOptions()
	opts.SetCreateIfMissing(true)
	opts.SetCreateIfMissingColumnFamilies(true)
	return opts
}

// New opens a new database in a directory of tb's own, closed when tb's run ends.
func New(tb testing.TB) *grocksdb.DB {
	tb.Helper()
	db, err := OpenAt(tb.TempDir())
	if err != nil {
		tb.Fatalf("open RocksDB: %v", err)
	}
	tb.Cleanup(db.Close)
	return db
}

// NewCF opens a new database in a directory of tb's own with the default column family and the
// ones named, and returns the handles of the named ones in the order given. When tb's run ends
// the handles are destroyed and the database closed.
func NewCF(tb testing.TB, names ...string) (*grocksdb.DB, []*grocksdb.ColumnFamilyHandle) {
	tb.Helper()
	opts := Options()
	defer opts.Destroy()
	all := append([]string{"default"}, names...)
	cfOpts := make([]*grocksdb.Options, len(all))
	for i := range cfOpts {
		cfOpts[i] = opts
	}
	db, cfs, err := grocksdb.OpenDbColumnFamilies(opts, tb.TempDir(), all, cfOpts)
	if err != nil {
		tb.Fatalf("open RocksDB with column families %q: %v", names, err)
	}
	tb.Cleanup(func() {
		for _, cf := range cfs {
			cf.Destroy()
		}
		db.Close()
	})
	return db, cfs[1:]
}

// OpenAt opens the database at dir, creating it if it does not exist.
func OpenAt(dir string) (*grocksdb.DB, error) {
	opts := Options()
	defer opts.Destroy()
	return grocksdb.OpenDb(opts, dir)
}
