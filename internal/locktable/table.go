// Package locktable is the key-lock table of one database: ownerless, in memory, shared by every
// Locker of that database in the process (docs/DESIGN.md §2). A key has one exclusive holder or
// any number of shared ones (holders.go). The table is sharded by a 64-bit hash of the record so
// that requests on different keys rarely share a mutex. A shard (shard.go) holds the entries of
// the keys held or waited on (index.go) and their wait queues (waitqueue.go), served by the grant
// rule (grant.go), and, per clock (clockslots.go), a heap of deadlines served by one timer
// (scheduler.go, scheduler_heap.go). The table knows its users as tenants (tenant.go) and their
// locks as claims (claim.go); the owners that wait for each other are found by the wait-for graph
// (waitgraph.go).
//
// Locking. A shard's mutex guards the shard's entries and all they lead to (waiters, schedulers,
// the range spaces the shard is home to), and the fields of a Claim whose comment says so. The
// methods of shard and of those types run with that mutex held and return with it held, unless
// the first sentence of their comment says otherwise; any other function that needs a mutex held,
// and any function entered with a mutex held that returns with it released, says so in the first
// sentence of its comment. Of two shards' mutexes, a key shard's is taken first (lockPair); the
// wait-for graph's mutex is taken before any shard's, never under one.
//
// It needs neither cgo nor RocksDB: the API (package recordlock) keeps the database, and the
// table knows it only by its path, for log records, and by its timestamps (stamps.go).
package locktable

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"
)

const (
	// shardBits is how many low bits of a record's hash choose its shard.
	shardBits = 7
	// KeyShards is the number of shards a record's hash spreads the keys over.
	KeyShards = 1 << shardBits
	// homeShards is the number of home shards, where the keys that range locks cover are kept
	// (rangespace.go): apart from the key shards, so that no key that a range does not cover
	// waits behind a range's work. A hash places a record in one when its bit KeyShards is set
	// (routed); Table.hash leaves it clear.
	homeShards = 8
	// ShardCount is the number of shards of a table, its home shards included.
	ShardCount = KeyShards + homeShards
)

// falseSharingRange is how far apart memory written by different cores is kept: two cache lines,
// because many CPUs prefetch lines in aligned pairs and so move a neighbour's line along.
const falseSharingRange = 128

// Table is the key-lock table of one database.
type Table struct {
	tableHeader
	// The header is read by every request and the shards are written; the padding also starts the
	// shards on a falseSharingRange boundary (a table is page-aligned), which the layout of
	// shardState counts on.
	_      [2*falseSharingRange - unsafe.Sizeof(tableHeader{})%falseSharingRange]byte
	shards [ShardCount]shard
	clocks clockSlots
	graph  waitGraph   // the wait-for graph of the database's owners
	ranges tableRanges // the range spaces' mutex, test switch and hooks; their map is in the header
	// checks is what the checker of a build with the tag invariants keeps of the table beyond
	// its state (shard_check.go); empty without the tag.
	checks tableChecks

	hookFailures atomic.Uint64 // hooks fail rarely, so one shared counter is cheap
	faultOnce    sync.Once     // a table fault is logged once per database
}

type tableHeader struct {
	path   string // the database's, for log records
	seed   maphash.Seed
	stamps *Stamps
	// spaces maps each column family that has had a range request to its range space
	// (rangespace.go); nil until one has. Every request reads it, so it is kept here with the seed.
	spaces atomic.Pointer[spaceMap]
}

// New returns the table of the database at path, whose grants mint AcquiredAt from stamps.
func New(path string, stamps *Stamps) *Table {
	t := &Table{tableHeader: tableHeader{path: path, seed: maphash.MakeSeed(), stamps: stamps}}
	for i := range t.shards {
		t.shards[i].init(t)
	}
	return t
}

// hash is the table's hash of the record (cf, key). Column family 0, the default, hashes as the
// key alone.
func (t *Table) hash(cf uint32, key []byte) uint64 {
	// cf spread over every bit, the shard bits too (0 for the default column family), with no
	// branch: the function must stay small enough to be inlined into Acquire.
	return (maphash.Bytes(t.seed, key) ^ uint64(cf)*0x9e3779b97f4a7c15) &^ KeyShards
}

func (t *Table) shard(hash uint64) *shard { return &t.shards[hash&(2*KeyShards-1)] }

// evict takes every trace of c out of the table, for Shutdown: each waiting request of c fails
// with ErrClosed, and the claims of c are returned for the caller to release (outside the shard
// mutexes, since a release may wait for a running fence).
func (t *Table) evict(c *Tenant) []*Claim {
	var held []*Claim
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		held = sh.evict(c, held)
		sh.unlockAndRunDeferred()
	}
	return held
}

// logFault reports a table inconsistency once per database; it never panics.
func (t *Table) logFault(c *Tenant, msg string) {
	t.faultOnce.Do(func() {
		c.log.Warn("recordlock: key table fault; the key was left as found", "db", t.path, "fault", msg)
	})
}
