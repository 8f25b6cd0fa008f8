// Command rocksdbversion prints the version of the RocksDB library that grocksdb runs against,
// as that library writes it into a new database's OPTIONS file, the grocksdb release the program
// was built with, and the files the RocksDB and C libraries were loaded from. compat/compat.sh
// runs it to show what it tested.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"

	"github.com/recordlock/recordlock/internal/tempdb"
)

func main() {
	v, err := rocksdbVersion()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rocksdbversion:", err)
		os.Exit(1)
	}
	fmt.Printf("RocksDB %s, grocksdb %s\n", v, grocksdbVersion())
	fmt.Printf("loaded from %s and %s\n", loaded("librocksdb.so"), loaded("libc.so"))
}

// loaded returns the file mapped into this process whose name starts with name, read from
// /proc/self/maps, or a note that there is none (a static link).
func loaded(name string) string {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return "(" + err.Error() + ")"
	}
	for line := range strings.Lines(string(b)) {
		// address, permissions, offset, device, inode, and the path if the mapping is a file's
		if f := strings.Fields(line); len(f) == 6 && strings.HasPrefix(filepath.Base(f[5]), name) {
			return f[5]
		}
	}
	return "(no " + name + " mapped)"
}

var versionLine = regexp.MustCompile(`(?m)^\s*rocksdb_version=(\S+)\s*$`)

// rocksdbVersion opens a database in a temporary folder and reads the version the library
// recorded in its OPTIONS file: the loaded library's own, not the headers'.
func rocksdbVersion() (string, error) {
	dir, err := os.MkdirTemp("", "rocksdbversion")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	db, err := tempdb.OpenAt(dir)
	if err != nil {
		return "", err
	}
	db.Close()
	files, err := filepath.Glob(filepath.Join(dir, "OPTIONS-*"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("no OPTIONS file in %s", dir)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		return "", err
	}
	m := versionLine.FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("no rocksdb_version in %s", files[0])
	}
	return string(m[1]), nil
}

// grocksdbVersion is the grocksdb module version this binary was built with.
func grocksdbVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			if m.Path == "github.com/linxGnu/grocksdb" {
				if m.Replace != nil {
					m = m.Replace
				}
				return m.Version
			}
		}
	}
	return "(unknown)"
}
