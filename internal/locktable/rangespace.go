package locktable

import (
	"bytes"
	"maps"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/google/btree"
)

// The range space of a column family (docs/DESIGN.md §17): made by the column family's first
// range request, in the column family's home shard. It keeps the column family's range locks and
// queued range requests, and the keys they cover, which are brought into the home shard
// (rangeadopt.go); every other key of the column family stays in its own shard.

// tableRanges is what the table keeps of its range spaces apart from the map of them
// (tableHeader.spaces): the mutex that makes them one at a time, and a switch and hooks for tests.
type tableRanges struct {
	mu sync.Mutex // serializes making a range space
	// noConflicts makes ranges conflict with nothing: for tests that show a missing check is
	// caught.
	noConflicts atomic.Bool
	hooks       rangeHooks
}

// rangeHooks are steps that a test of the package takes inside the paths of ranges, at points
// no call reaches, on a table of its own: each is set before the calls it steps into, and nil
// otherwise. A hook that clears itself does so where it runs, under the mutex it runs under.
type rangeHooks struct {
	// betweenBatches runs between two batches of keys brought into a home shard, with no mutex
	// held, in place of the yield there (yieldMutexes).
	betweenBatches func()
	// coverRead runs as a key request has read the cover, with its shard's mutex held: a test
	// runs a range request between that read and the entry the key request makes.
	coverRead func()
	// spanLeft runs as a span has left the live cover, with the home shard's mutex held: a test
	// takes a key inside the span from its own shard there, as a key request may from then on.
	spanLeft func()
}

// rangeSpace is what the home shard of a column family keeps of its ranges, guarded by the home
// shard's mutex; cover alone is read without it.
//
// Invariants, whenever the home shard's mutex is released (a build with the tag invariants checks
// each there: shard_check.go):
//   - ranges counts its items, each in the tree of its state and mode; queue is the items of its
//     tree of queued requests, in the order of arrival, the upgrades (seq 0) first.
//   - The live cover holds, once each, the span of every range lock and queued request but an
//     upgrade's stand-in (the lock's span is there), and of every range request still bringing
//     its keys in (covering, in no tree yet).
//   - keys are the home shard's entries of the column family, all of them, each of this space
//     and ordered by its keyClaim's key, which is its own; each is routed home by a live span or
//     else by its retired span in orphans, and a retiring span counts those it routes.
//   - No exclusive range lock meets a range lock of another owner, and no range lock meets a
//     lock of a key inside it that conflicts with it (unless DisableRangeConflicts).
//   - waiting holds, for each owner, a request of that owner queued in the space; a queued
//     range request's runHead, while queued, is an older plain exclusive request of its span.
//   - serving, again and repassDue are clear: a space is served and gone over again within the
//     critical section that asked for it.
type rangeSpace struct {
	home    *shard
	homeIdx uint64 // home's place among the table's shards
	// ready is closed once every key shard has noted the column family's entries made before the
	// space (bringOwnerWaits): a range request finds the keys inside it only among those noted.
	ready chan struct{}
	// cover is the spans a key request must look for its key in before it takes its own shard's
	// lock for granted: published under the home shard's mutex, read under any.
	cover atomic.Pointer[rangeCover]
	keys  *btree.BTreeG[*keyEntry] // the entries of the home shard's keys, by key (entryBefore)
	// orphans is the keys that no live span covers, each with the retired span that routes it
	// home (rangecover.go).
	orphans map[*keyEntry]*retiredSpan
	probes  []*keyEntry // the probes of searches that ended (probe)
	// broughtSteps is what bringing keys in did under one hold of a shard's mutex at most.
	broughtSteps broughtSteps
	ranges       rangeSet     // its range locks and queued range requests
	queue        []*rangeItem // its queued range requests, oldest first
	// waiting is the request each owner has queued in the space, of a key or a range: what a lock
	// of that owner's waits on, for the exception to the order of arrival (rangepass.go).
	waiting map[Owner]*waiter
	// seq is the last number given: every request its place in the order of arrival, and every
	// range item its id.
	seq uint64
	// serving is set while serveRanges runs, and again asks it to go over the queue once more.
	serving, again bool
	// repassDue is set while the space is listed in its home shard's repassDue.
	repassDue bool
}

// homeKey is the key of e, an entry of a home shard: set as e comes in and read after its last
// holder and waiter left, as e leaves.
func (e *keyEntry) homeKey() []byte { return e.keyClaim.key() }

// entryBefore orders a space's index of keys.
func entryBefore(a, b *keyEntry) bool { return bytes.Compare(a.homeKey(), b.homeKey()) < 0 }

// probe is an entry that stands for key in a search of sp's index of keys, until unprobe gives it
// back: the space keeps those given back, so that a search allocates nothing once searches have
// run. A search's callback may search again, so each takes its own.
func (sp *rangeSpace) probe(key []byte) *keyEntry {
	var e *keyEntry
	if n := len(sp.probes); n > 0 {
		e, sp.probes = sp.probes[n-1], sp.probes[:n-1]
	} else {
		e = &keyEntry{keyClaim: new(Claim)}
	}
	e.keyClaim.keyPtr, e.keyClaim.keyLen = unsafe.SliceData(key), uint32(len(key))
	return e
}

// unprobe gives back a probe, which keeps no key alive.
func (sp *rangeSpace) unprobe(e *keyEntry) {
	e.keyClaim.keyPtr, e.keyClaim.keyLen = nil, 0
	sp.probes = append(sp.probes, e)
}

// nextSeq gives a request its place in the order of arrival, and a range item its id.
func (sp *rangeSpace) nextSeq() uint64 {
	sp.seq++
	return sp.seq
}

// DisableRangeConflicts makes range locks conflict with nothing, for a test that shows that the
// phantoms the check prevents are caught.
func (t *Table) DisableRangeConflicts() { t.ranges.noConflicts.Store(true) }

// homeOf is the place among the table's shards of column family cf's home shard.
func homeOf(cf uint32) uint64 { return KeyShards + (uint64(cf)*0x9e3779b97f4a7c15>>32)&(homeShards-1) }

// routed is hash with its shard bits set to home, a home shard's place.
func routed(hash, home uint64) uint64 { return hash&^(2*KeyShards-1) | home }

// spaceMap is the table's range spaces by column family, copied whenever one is added: every key
// request of a table that had a range reads it, so the column families numbered below lowSpaces,
// which are most, are found by index rather than in the map.
type spaceMap struct {
	low  [lowSpaces]*rangeSpace
	high map[uint32]*rangeSpace
}

const lowSpaces = 16

// spaceOf is column family cf's range space, nil while it has had no range request.
func (t *Table) spaceOf(cf uint32) *rangeSpace {
	m := t.spaces.Load()
	switch {
	case m == nil:
		return nil
	case cf < lowSpaces:
		return m.low[cf]
	}
	return m.high[cf]
}

// spaceFor is column family cf's range space, made now if it has none. Making it stops nobody:
// the keys its ranges cover are brought in by the range requests themselves, and the keys owners
// wait for are brought in here, a batch at a time (bringOwnerWaits).
func (t *Table) spaceFor(cf uint32) *rangeSpace {
	if sp := t.spaceOf(cf); sp != nil {
		<-sp.ready
		return sp
	}
	t.ranges.mu.Lock()
	defer t.ranges.mu.Unlock()
	if sp := t.spaceOf(cf); sp != nil {
		<-sp.ready
		return sp
	}
	idx := homeOf(cf)
	sp := &rangeSpace{home: &t.shards[idx], homeIdx: idx, keys: btree.NewG(16, entryBefore), ready: make(chan struct{})}
	sp.cover.Store(&rangeCover{})
	home := sp.home
	home.mu.Lock()
	if home.spaces == nil {
		home.spaces = map[uint32]*rangeSpace{}
	}
	home.spaces[cf] = sp
	home.mu.Unlock()
	var next spaceMap
	if old := t.spaces.Load(); old != nil {
		next.low = old.low
		next.high = maps.Clone(old.high)
	}
	if cf < lowSpaces {
		next.low[cf] = sp
	} else {
		if next.high == nil {
			next.high = map[uint32]*rangeSpace{}
		}
		next.high[cf] = sp
	}
	t.spaces.Store(&next)
	sp.bringOwnerWaits(t, cf)
	close(sp.ready)
	return sp
}

// placed is the hash that places the record (cf, key) now: in its column family's home shard
// once a range brought it there.
func (t *Table) placed(cf uint32, key []byte) uint64 {
	hash := t.hash(cf, key)
	sp := t.spaceOf(cf)
	if sp == nil {
		return hash
	}
	at := routed(hash, sp.homeIdx)
	sp.home.mu.Lock()
	defer sp.home.mu.Unlock()
	if sp.home.index.find(at, cf, key) != nil {
		return at
	}
	return hash
}
