package locktable

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/google/btree"
)

// Range mode (docs/DESIGN.md §17). A column family's first range lock moves every lock of that
// column family, of keys and ranges, into one shard, its home, for good: there a range finds the
// keys inside it in an ordered index, and a key the ranges over it, under one mutex. Until then
// the column family's keys are spread over the shards by hash and pay nothing for ranges.

// rangeRoutes maps each column family in range mode to its home shard. It is replaced, never
// changed, with every shard's mutex held, so a request reads it before taking its shard's mutex
// and checks under it that it is still the same.
type rangeRoutes struct {
	home map[uint32]uint64
}

// rangeModes is the table's part of range mode.
type rangeModes struct {
	routes atomic.Pointer[rangeRoutes] // nil until some column family has had a range lock
	mu     sync.Mutex                  // serializes entering range mode; taken before shard mutexes
	// noConflicts makes ranges conflict with nothing: for tests that show a missing check is
	// caught.
	noConflicts atomic.Bool
}

// rangeSpace is what the home shard of a column family in range mode keeps of it, guarded by the
// shard's mutex.
type rangeSpace struct {
	cf     uint32
	keys   *btree.BTreeG[*keyEntry] // the column family's keys held or waited on, by key
	ranges rangeTree                // its range locks and queued range requests
	queue  []*rangeItem             // its queued range requests, oldest first
	seq    uint64                   // the last request given a place in the order of arrival
	ids    uint64
	// serving is set while serveRanges runs, and again asks it to go over the queue once more.
	serving, again bool
}

// rangedKey is what an entry of a column family in range mode keeps for its space's index.
type rangedKey struct {
	key   []byte
	space *rangeSpace
}

func entryBefore(a, b *keyEntry) bool { return bytes.Compare(a.ranged().key, b.ranged().key) < 0 }

// pivotEntry is an entry that only orders key among a space's entries, for a look-up.
func pivotEntry(key []byte) *keyEntry {
	e := &keyEntry{}
	e.setRanged(&rangedKey{key: key})
	return e
}

func newRangeSpace(cf uint32) *rangeSpace {
	return &rangeSpace{cf: cf, keys: btree.NewG(16, entryBefore)}
}

// nextSeq gives a request its place in the order of arrival.
func (sp *rangeSpace) nextSeq() uint64 {
	sp.seq++
	return sp.seq
}

// DisableRangeConflicts makes range locks conflict with nothing, for a test that shows that the
// phantoms the check prevents are caught.
func (t *Table) DisableRangeConflicts() { t.modes.noConflicts.Store(true) }

// homeOf is the home shard a column family in range mode would have.
func homeOf(cf uint32) uint64 { return (uint64(cf) * 0x9e3779b97f4a7c15 >> 32) & (ShardCount - 1) }

// routed is hash with its shard bits set to home.
func routed(hash, home uint64) uint64 { return hash&^(ShardCount-1) | home }

// route is the hash that places the record of cf with the given hash, given the routes r.
func (r *rangeRoutes) route(cf uint32, hash uint64) uint64 {
	if home, ok := r.home[cf]; ok {
		return routed(hash, home)
	}
	return hash
}

// placed is the hash that places the record (cf, key) now.
func (t *Table) placed(cf uint32, key []byte) uint64 {
	hash := t.hash(cf, key)
	if r := t.modes.routes.Load(); r != nil {
		hash = r.route(cf, hash)
	}
	return hash
}

// enterRangeMode puts column family cf in range mode, if it is not yet, and returns its home
// shard.
func (t *Table) enterRangeMode(cf uint32) *shard {
	if r := t.modes.routes.Load(); r != nil {
		if home, ok := r.home[cf]; ok {
			return &t.shards[home]
		}
	}
	t.modes.mu.Lock()
	defer t.modes.mu.Unlock()
	home := homeOf(cf)
	old := t.modes.routes.Load()
	if old != nil {
		if _, ok := old.home[cf]; ok {
			return &t.shards[home]
		}
	}
	for i := range t.shards {
		t.shards[i].mu.Lock()
	}
	next := &rangeRoutes{home: map[uint32]uint64{cf: home}}
	if old != nil {
		for k, v := range old.home {
			next.home[k] = v
		}
	}
	t.modes.routes.Store(next)
	to := &t.shards[home]
	sp := newRangeSpace(cf)
	if to.spaces == nil {
		to.spaces = map[uint32]*rangeSpace{}
	}
	to.spaces[cf] = sp
	var moving []*keyEntry
	for i := range t.shards {
		from := &t.shards[i]
		moving = moving[:0]
		from.index.all(func(e *keyEntry) {
			if ecf, _ := e.record(); ecf == cf {
				moving = append(moving, e)
			}
		})
		for _, e := range moving {
			from.moveEntry(to, e, sp, home)
		}
	}
	for i := range t.shards {
		t.shards[i].unlockAndRunDeferred()
	}
	return to
}

// moveEntry moves e, an entry of sp's column family, and its holders and waiters, from sh to the
// column family's home shard to, with every shard's mutex held.
func (sh *shard) moveEntry(to *shard, e *keyEntry, sp *rangeSpace, home uint64) {
	_, key := e.record()
	rk := &rangedKey{key: bytes.Clone(key), space: sp}
	if sh == to {
		e.setRanged(rk)
		sp.keys.ReplaceOrInsert(e)
		return
	}
	sh.index.remove(e)
	ne := to.newEntry(routed(e.hash, home))
	ne.holder, ne.head, ne.tail, ne.shares = e.holder, e.head, e.tail, e.shares
	ne.wakePending, ne.unwatched, ne.sharers = e.wakePending, e.unwatched, e.sharers
	ne.setRanged(rk)
	move := func(h *Hold) {
		scheduled := h.heapIdx >= 0
		sh.unschedule(h)
		h.hash.Store(routed(h.hash.Load(), home))
		h.e = ne
		if scheduled {
			to.schedule(h)
		}
	}
	for _, h := range ne.appendHolders(nil) {
		move(h)
		sh.held--
		to.held++
	}
	for w := ne.head; w != nil; w = w.next {
		move(w.h)
		if w.counted {
			sh.counts.waiting--
			to.counts.waiting++
		}
	}
	e.holder, e.head, e.tail, e.shares, e.sharers = nil, nil, nil, 0, nil
	e.unwatched = false
	sh.recycle(e)
	to.index.insert(ne)
	sp.keys.ReplaceOrInsert(ne)
}
