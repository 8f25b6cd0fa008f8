// Package tempdb opens the throwaway RocksDB databases the example programs run on.
package tempdb

import (
	"os"

	"github.com/linxGnu/grocksdb"
)

// Open opens a new RocksDB database in a fresh directory under the system's temp dir, named with
// prefix. The returned func closes the database and removes the directory.
func Open(prefix string) (*grocksdb.DB, func(), error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, nil, err
	}
	db, err := OpenAt(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return db, func() {
		db.Close()
		os.RemoveAll(dir)
	}, nil
}

// OpenAt opens, creating it if needed, the RocksDB database at dir.
func OpenAt(dir string) (*grocksdb.DB, error) {
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	return grocksdb.OpenDb(opts, dir)
}
