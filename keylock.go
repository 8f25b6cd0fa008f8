package recordlock

import (
	"hash/maphash"
	"path/filepath"
	"sync"
	"sync/atomic"
	"unsafe"
)

// The key-lock table of one database: ownerless, in memory, shared by every Locker of that
// database in the process (docs/DESIGN.md §2); a key has one exclusive holder or any number of
// shared ones (keylock_holders.go). It is sharded by a 64-bit hash of the record so that Lockers
// on different keys rarely share a mutex. The shards (keylock_shard.go) hold the entries of the
// keys held or waited on (keylock_index.go), their wait queues
// (keylock_waitqueue.go), served by the grant rule (keylock_grant.go), and, per clock (keylock_clockslots.go), a heap of deadlines served by one
// timer (keylock_scheduler.go, keylock_deadlineheap.go). The table sees a Locker only as its
// tenant (keylock_tenant.go); Txns that wait for each other are found in keylock_waitgraph.go.

const (
	// shardBits is how many low bits of a record's hash choose its shard.
	shardBits  = 7
	shardCount = 1 << shardBits
)

// falseSharingRange is how far apart memory written by different cores is kept: two cache lines,
// because many CPUs prefetch lines in aligned pairs and so move a neighbour's line along.
const falseSharingRange = 128

// database is what the process keeps of one database for as long as it runs, beyond the life of
// any table: its timestamps keep increasing when its last Locker closes and a new one opens after
// the wall clock stepped back, and a coordinator removed without declaring the database
// standalone keeps its locks failing closed.
type database struct {
	stamps timestampSource
	coord  coordinatorSlot
}

// registry maps a database's canonical path to its table and its database state.
var registry = struct {
	sync.Mutex
	tables    map[string]*table
	databases map[string]*database
}{tables: map[string]*table{}, databases: map[string]*database{}}

type table struct {
	tableHeader
	// The header is read by every Lock and the shards are written; the padding also starts the
	// shards on a falseSharingRange boundary (a table is page-aligned), which the layout of
	// shardState counts on.
	_      [2*falseSharingRange - unsafe.Sizeof(tableHeader{})%falseSharingRange]byte
	shards [shardCount]shard
	clocks clockSlots
	graph  waitGraph // the wait-for graph of the database's Txns

	hookFailures atomic.Uint64 // for Stats; hooks fail rarely, so one shared counter is cheap
	faultOnce    sync.Once     // a key-table fault is logged once per database
}

type tableHeader struct {
	path string
	refs int // Lockers using it; guarded by registry
	seed maphash.Seed
	db   *database
}

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

// acquireTable returns the table of the database at path, creating it on first use.
func acquireTable(path string) *table {
	registry.Lock()
	defer registry.Unlock()
	t := registry.tables[path]
	if t == nil {
		db := registry.databases[path]
		if db == nil {
			db = &database{}
			registry.databases[path] = db
		}
		t = &table{tableHeader: tableHeader{path: path, seed: maphash.MakeSeed(), db: db}}
		for i := range t.shards {
			t.shards[i].init(t)
		}
		registry.tables[path] = t
	}
	t.refs++
	return t
}

// releaseTable drops one reference; the last one removes the table. Its timers were stopped as
// the clocks of its Lockers were dropped.
func releaseTable(t *table) {
	registry.Lock()
	defer registry.Unlock()
	t.refs--
	if t.refs == 0 {
		delete(registry.tables, t.path)
	}
}

// hash is the table's hash of the record (cf, key). Column family 0, the default, hashes as the
// key alone.
func (t *table) hash(cf uint32, key []byte) uint64 {
	h := maphash.Bytes(t.seed, key)
	if cf != 0 {
		h ^= uint64(cf) * 0x9e3779b97f4a7c15 // spreads cf over every bit, the shard bits too
	}
	return h
}

func (t *table) shard(hash uint64) *shard { return &t.shards[hash&(shardCount-1)] }

// evict takes every trace of c out of the table, for Close: each waiting Lock call of c fails
// with ErrClosed, and the handles c holds are returned for the caller to release (outside the
// shard mutexes, since a release may wait for a running Fence).
func (t *table) evict(c *tenant) []*Handle {
	var held []*Handle
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		held = sh.evict(c, held)
		sh.unlockAndRunHooks()
	}
	return held
}

// logFault reports a key-table inconsistency once per database; it never panics.
func (t *table) logFault(c *tenant, msg string) {
	t.faultOnce.Do(func() {
		c.log.Warn("recordlock: key table fault; the key was left as found", "db", t.path, "fault", msg)
	})
}
