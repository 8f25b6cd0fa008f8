package locktable

import (
	"bytes"
	"slices"
	"sync/atomic"

	"github.com/google/btree"

	"github.com/recordlock/recordlock/internal/invariants"
)

// A key shard's ordered view of its entries of column families that have a range space, so that
// a range request finds the keys inside its span there in O(log n + k) rather than by a walk of
// the shard's index (docs/DESIGN.md §17.1). The key path pays an append for it: an entry made in
// such a column family is noted as pending (the entry alone), in no order, and a range request's visit sorts the
// pending ones into the tree. An entry that leaves while it is the last one pending is taken off
// again; of any other, neither is told: a visit checks each item it reads against the index (live)
// and drops the ones that left, and both are compacted once they hold more than twice the shard's
// entries, as entries come and as they go, so they stay within a constant of its size.

// orderedKey is an entry of a key shard, as its order holds it: the record, its hash, and the
// entry it had when sorted in. The key is the one of a claim of the entry, which never changes.
type orderedKey struct {
	cf   uint32
	key  []byte
	hash uint64
	e    *keyEntry
}

func orderedBefore(a, b orderedKey) bool {
	if a.cf != b.cf {
		return a.cf < b.cf
	}
	return bytes.Compare(a.key, b.key) < 0
}

// keyOrder is a key shard's ordered view, guarded by the shard's mutex.
type keyOrder struct {
	pending []*keyEntry
	tree    *btree.BTreeG[orderedKey]
	// read counts the items range requests read, pending and in the tree, for the tests that
	// bound their cost.
	read invariants.Counter
	// noted is set once anything was noted, or a key request of a column family with a range
	// space read the cover here (routesHome): a range request passes a shard where neither
	// happened without taking its mutex.
	noted atomic.Bool
}

// orderSlack is the size below which neither the pending list nor the tree is compacted.
const orderSlack = 64

// placeInOrder is pending entry e's place in the shard's order: e as the tree would hold it, its
// record read now. It is not ok once e is spare; an entry that left and was made again for
// another record is placed as that record.
func (sh *shard) placeInOrder(e *keyEntry) (orderedKey, bool) {
	cf, key := e.record()
	return orderedKey{cf: cf, key: key, hash: e.hash, e: e}, e.holder != nil || e.head != nil
}

// live reports whether k still names an entry of the shard, the one it was noted with.
func (sh *shard) live(k orderedKey) bool { return sh.index.find(k.hash, k.cf, k.key) == k.e }

// noteEntry notes e, an entry of sh, a key shard, for a record of a column family with a range
// space: as it is made, or, made before the column family had one, as the space is made
// (bringOwnerWaits).
func (sh *shard) noteEntry(e *keyEntry) {
	o := &sh.order
	if len(o.pending) == 0 && !o.noted.Load() {
		o.noted.Store(true)
	}
	o.pending = append(o.pending, e)
	if len(o.pending) > 2*sh.index.n+orderSlack {
		sh.compactPending()
	}
}

// compactPending drops the pending entries that left the shard.
func (sh *shard) compactPending() {
	o := &sh.order
	kept := o.pending[:0]
	for _, e := range o.pending {
		if k, ok := sh.placeInOrder(e); ok && sh.live(k) {
			kept = append(kept, e)
		}
	}
	clear(o.pending[len(kept):])
	o.pending = kept
	if cap(kept) > 4*len(kept)+orderSlack {
		o.pending = slices.Clone(kept) // let go of the room the entries that left took
	}
}

// compactTree drops the tree's items whose entry left the shard.
func (sh *shard) compactTree() {
	o := &sh.order
	var stale []orderedKey
	o.tree.Ascend(func(k orderedKey) bool {
		if !sh.live(k) {
			stale = append(stale, k)
		}
		return true
	})
	for _, k := range stale {
		o.tree.Delete(k)
	}
}

// unnote is told that e is leaving the shard. It takes e off the pending list if it was the last
// noted there: a key locked and released before any range request came by costs neither a
// compaction nor a sort. And as entries leave, it compacts the pending list and the tree once
// either holds more than twice the shard's entries, as noteEntry and sortPending do as entries
// come: what they hold stays within a constant of the entries, and a shard whose keys all left
// holds none of them (the entries it kept for reuse aside). Each compaction follows the leaving
// of half the items it reads, so it costs O(1) per entry that leaves.
func (sh *shard) unnote(e *keyEntry) {
	if o := &sh.order; len(o.pending) != 0 || o.tree != nil {
		sh.unnoteFrom(e)
	}
}

// unnoteFrom is unnote of a shard whose order holds something.
func (sh *shard) unnoteFrom(e *keyEntry) {
	o := &sh.order
	n := len(o.pending)
	if n > 0 && o.pending[n-1] == e {
		o.pending[n-1] = nil
		o.pending = o.pending[:n-1]
		n--
	}
	if sh.index.n == 0 { // nothing is left to order
		clear(o.pending)
		o.pending = o.pending[:0]
		if o.tree != nil {
			o.tree.Clear(false)
		}
		return
	}
	limit := 2*sh.index.n + orderSlack
	if n > limit {
		sh.compactPending()
	}
	if o.tree != nil && o.tree.Len() > limit {
		sh.compactTree()
	}
}

// sortPending moves at most max pending items that are still live into the tree, and reports
// whether none is left pending. A tree grown past twice the shard's entries is rebuilt from its
// live items first.
func (sh *shard) sortPending(max int) bool {
	o := &sh.order
	if o.tree == nil {
		o.tree = btree.NewG(16, orderedBefore)
	}
	if o.tree.Len() > 2*sh.index.n+orderSlack {
		sh.compactTree()
	}
	n := min(max, len(o.pending))
	o.read.Add(uint64(n))
	rest := len(o.pending) - n
	for _, e := range o.pending[rest:] {
		if k, ok := sh.placeInOrder(e); ok && sh.live(k) {
			o.tree.ReplaceOrInsert(k)
		}
	}
	clear(o.pending[rest:])
	o.pending = o.pending[:rest]
	return rest == 0
}

// inSpan collects into batch, up to max, the live entries of column family cf in [start, end)
// (end nil: no bound) from the tree, dropping at most max stale items it meets on the way, and
// returns the batch and whether it reached the span's end.
func (sh *shard) inSpan(cf uint32, start, end []byte, max int, batch []*keyEntry) ([]*keyEntry, bool) {
	o := &sh.order
	var stale []orderedKey
	done := true
	o.tree.AscendGreaterOrEqual(orderedKey{cf: cf, key: start}, func(k orderedKey) bool {
		o.read.Inc()
		if k.cf != cf || end != nil && bytes.Compare(k.key, end) >= 0 {
			return false
		}
		if len(batch) == max || len(stale) == max {
			done = false
			return false
		}
		if sh.live(k) {
			batch = append(batch, k.e)
		} else {
			stale = append(stale, k)
		}
		return true
	})
	for _, k := range stale {
		o.tree.Delete(k)
	}
	return batch, done
}

// forget takes e's item out of the tree: e is leaving the shard for its home shard.
func (sh *shard) forget(cf uint32, key []byte) {
	if sh.order.tree != nil {
		sh.order.tree.Delete(orderedKey{cf: cf, key: key})
	}
}

// empty reports whether nothing is pending or in the tree.
func (o *keyOrder) empty() bool { return len(o.pending) == 0 && (o.tree == nil || o.tree.Len() == 0) }
