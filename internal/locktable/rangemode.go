package locktable

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"time"

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

// rangeModes is the table's part of range mode, but for its routes (tableHeader).
type rangeModes struct {
	mu sync.Mutex // serializes entering range mode; taken before shard mutexes
	// noConflicts makes ranges conflict with nothing: for tests that show a missing check is
	// caught.
	noConflicts atomic.Bool
}

// rangeSpace is what the home shard of a column family in range mode keeps of it, guarded by the
// shard's mutex.
type rangeSpace struct {
	keys   *btree.BTreeG[*rangedKey] // the column family's keys held or waited on, by key
	ranges rangeSet                  // its range locks and queued range requests
	queue  []*rangeItem              // its queued range requests, oldest first
	// waiting is the request each owner has queued in the column family, of a key or a range:
	// what a lock of that owner's waits on, for the exception to the order of arrival
	// (rangepass.go).
	waiting map[Owner]*waiter
	// seq is the last number given: every request its place in the order of arrival, and every
	// range item its id.
	seq uint64
	// serving is set while serveRanges runs, and again asks it to go over the queue once more.
	serving, again bool
}

// rangedKey is an entry of a column family in range mode, as its space's index holds it. The
// index holds these rather than the entries, whose link is reused once they leave (index.go), so
// that an entry taken out of the table by serveKey leaves the index after it (rangedKey.served).
type rangedKey struct {
	key   []byte
	space *rangeSpace
	e     *keyEntry
}

func keyBefore(a, b *rangedKey) bool { return bytes.Compare(a.key, b.key) < 0 }

func newRangeSpace() *rangeSpace {
	return &rangeSpace{keys: btree.NewG(16, keyBefore)}
}

// nextSeq gives a request its place in the order of arrival, and a range item its id.
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
	if r := t.routes.Load(); r != nil {
		hash = r.route(cf, hash)
	}
	return hash
}

// acquireRouted is Acquire of a key once some column family of the table is in range mode: the
// record is placed by the routes, and in a column family in range mode the key also waits for
// the ranges over it (rangegrant.go). It is apart from Acquire so that a table that never had a
// range lock runs Acquire's path as it was.
func (h *Hold) acquireRouted(ctx context.Context, lease, timeout time.Duration, wait, ctxBounds bool) (time.Duration, error) {
	if h.flags()&FlagRange != 0 {
		return h.acquireRange(ctx, lease, timeout, wait, ctxBounds)
	}
	c := h.ten
	routes := c.tab.routes.Load()
	hash := routes.route(h.cf, c.tab.hash(h.cf, h.key()))
	h.hash = hash
	sh := c.tab.shard(hash)
	wall, mono := ReadClock(c.clock)
	sh.mu.Lock()
	if routes != c.tab.routes.Load() {
		sh.mu.Unlock()
		return h.acquireRouted(ctx, lease, timeout, wait, ctxBounds) // another column family entered range mode
	}
	if c.closed.Load() {
		sh.mu.Unlock()
		return 0, ErrClosed
	}
	e := sh.lookup(h)
	if e != nil && e.holder != nil && sh.settleHolders(e, h, c, mono) {
		e = sh.lookup(h) // settling may have emptied and removed the entry
	}
	sp := sh.spaces[h.cf] // nil unless the column family is in range mode
	blocked := sp != nil && sp.keyBlocked(sh, h, newest, true, c, mono)
	if sp != nil {
		e = sh.lookup(h) // settling lapsed ranges may have changed the entry
	}
	admitted, before := true, (*waiter)(nil)
	if sp != nil && e != nil {
		admitted, before = sp.placeNewcomer(e, h, c, mono)
	}
	switch {
	case (blocked || !admitted) && !wait:
		sh.unlockAndRunDeferred()
		return 0, ErrLocked
	case blocked || !admitted:
		if e == nil {
			e = sh.newRangedEntry(sp, h)
		}
		return mono, sh.waitBefore(ctx, e, h, before, lease, MonoAfter(mono, WaitBound(ctx, timeout, ctxBounds)), mono)
	case sp != nil && e != nil:
		sh.grantKey(e, h, wall, mono, lease, e.head != nil || e.rangeWaitsOver())
	case e != nil:
		return sh.takeBusy(ctx, e, h, wall, mono, lease, timeout, wait, ctxBounds)
	case sp != nil:
		e = sh.newRangedEntry(sp, h)
		// A range request it passed (rangepass.go) waits for it, and must see its lease end.
		sh.grantKey(e, h, wall, mono, lease, e.rangeWaitsOver())
	default:
		e = sh.newEntry(hash)
		sh.grantKey(e, h, wall, mono, lease, false)
		sh.index.insert(e)
	}
	sh.unlockAndRunDeferred()
	return mono, nil
}

// enterRangeMode puts column family cf in range mode, if it is not yet, and returns its home
// shard.
func (t *Table) enterRangeMode(cf uint32) *shard {
	if r := t.routes.Load(); r != nil {
		if home, ok := r.home[cf]; ok {
			return &t.shards[home]
		}
	}
	t.modes.mu.Lock()
	defer t.modes.mu.Unlock()
	home := homeOf(cf)
	old := t.routes.Load()
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
	t.routes.Store(next)
	to := &t.shards[home]
	sp := newRangeSpace()
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
	rk := &rangedKey{key: bytes.Clone(key), space: sp, e: e}
	for w := e.head; w != nil; w = w.next {
		if w.h.owner != nil {
			sp.listed(w) // queued before its column family had ranges
		}
	}
	if sh == to {
		e.setRanged(rk)
		for _, h := range e.appendHolders(nil) {
			h.SetFlags(FlagRanged)
		}
		sp.keys.ReplaceOrInsert(rk)
		return
	}
	ne := to.newEntry(routed(e.hash, home))
	hash := ne.hash
	*ne = *e // its holders and queue, and what the entry knows of them
	ne.hash = hash
	ne.setRanged(rk)
	rk.e = ne
	move := func(h *Hold) {
		scheduled := h.heapIdx >= 0
		sh.unschedule(h)
		atomic.StoreUint64(&h.hash, routed(h.hash, home))
		h.e = ne
		if scheduled {
			to.schedule(h)
		}
	}
	for _, h := range ne.appendHolders(nil) {
		move(h)
		h.SetFlags(FlagRanged)
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
	*e = keyEntry{hash: e.hash} // emptied, as remove takes it
	sh.remove(e)
	to.index.insert(ne)
	sp.keys.ReplaceOrInsert(rk)
}
