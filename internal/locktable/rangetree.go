package locktable

import (
	"bytes"
	"encoding/binary"
)

// rangeTree holds the range locks and queued range requests of one column family, ordered by
// start, as a treap whose every node knows the largest end in its subtree. That is what finds the
// ranges that meet a key or a span in O(log R + m) for m found, where a tree ordered by start
// alone would step over every range that starts before the span and ends before it too; the
// ordered containers we could take (google/btree, tidwall/btree) keep no such per-subtree value.
type rangeTree struct {
	root *rangeItem
	n    int
	rnd  uint64 // the state of the priorities' generator
	// steps counts the nodes its searches visited, for the tests that bound their cost.
	steps uint64
}

// rangeItem is a range claim's node in its column family's tree, held or queued.
type rangeItem struct {
	h *Claim
	// w is the queued request, nil once granted; its seq is the request's place in the column
	// family's order of arrival.
	w  *waiter
	id uint64 // orders items of one start: a number of nextSeq, unique in the column family

	left, right  *rangeItem
	prio         uint64
	maxEnd       []byte // the largest end in the subtree, unless maxUnbounded
	maxUnbounded bool
	// leftEnd is the largest end of the item and its left subtree, unless leftUnbounded: the
	// items that start at or before it. It answers containsAny with one comparison per level.
	leftEnd       []byte
	leftUnbounded bool
	// The first sixteen bytes of start and leftEnd, which settle most comparisons of containsAny
	// in two integer comparisons each.
	startPrefix, leftEndPrefix keyPrefix
	inTree                     bool
	tree                       *rangeTree // the tree of its rangeSet it is in, while inTree
	covering                   bool       // its span is in its space's live cover (rangecover.go)
}

func (it *rangeItem) start() []byte { return it.h.key() }
func (it *rangeItem) end() []byte   { return it.h.cold.span.end }

// before orders items by start, then by id.
func (it *rangeItem) before(o *rangeItem) bool {
	if c := compareKeys(it.start(), o.start()); c != 0 {
		return c < 0
	}
	return it.id < o.id
}

// fix recomputes it's largest ends from its own and its children's.
func (it *rangeItem) fix() {
	it.leftEnd, it.leftUnbounded = it.end(), it.end() == nil
	if l := it.left; l != nil {
		it.leftEnd, it.leftUnbounded = laterEnd(it.leftEnd, it.leftUnbounded, l.maxEnd, l.maxUnbounded)
	}
	it.leftEndPrefix = prefixOf(it.leftEnd)
	it.maxEnd, it.maxUnbounded = it.leftEnd, it.leftUnbounded
	if r := it.right; r != nil {
		it.maxEnd, it.maxUnbounded = laterEnd(it.maxEnd, it.maxUnbounded, r.maxEnd, r.maxUnbounded)
	}
}

// laterEnd returns the later of two ends, each nil with its flag set when it has no bound.
func laterEnd(a []byte, aUnbounded bool, b []byte, bUnbounded bool) ([]byte, bool) {
	switch {
	case aUnbounded || bUnbounded:
		return nil, true
	case compareKeys(b, a) > 0:
		return b, false
	}
	return a, false
}

func (t *rangeTree) insert(it *rangeItem) {
	t.rnd = t.rnd*6364136223846793005 + 1442695040888963407
	it.prio, it.left, it.right, it.inTree = t.rnd>>1|1, nil, nil, true
	it.startPrefix = prefixOf(it.start())
	t.root = insertItem(t.root, it)
	t.n++
}

func insertItem(n, it *rangeItem) *rangeItem {
	if n == nil {
		it.fix()
		return it
	}
	if it.before(n) {
		n.left = insertItem(n.left, it)
		if n.left.prio > n.prio {
			n = rotateRight(n)
		}
	} else {
		n.right = insertItem(n.right, it)
		if n.right.prio > n.prio {
			n = rotateLeft(n)
		}
	}
	n.fix()
	return n
}

func rotateRight(n *rangeItem) *rangeItem {
	l := n.left
	n.left, l.right = l.right, n
	n.fix()
	return l
}

func rotateLeft(n *rangeItem) *rangeItem {
	r := n.right
	n.right, r.left = r.left, n
	n.fix()
	return r
}

// remove takes it out of the tree; a no-op for an item that is not in it.
func (t *rangeTree) remove(it *rangeItem) {
	if !it.inTree {
		return
	}
	t.root = removeItem(t.root, it)
	it.left, it.right, it.inTree = nil, nil, false
	t.n--
}

func removeItem(n, it *rangeItem) *rangeItem {
	if n == nil {
		return nil
	}
	switch {
	case n == it:
		return joinItems(n.left, n.right)
	case it.before(n):
		n.left = removeItem(n.left, it)
	default:
		n.right = removeItem(n.right, it)
	}
	n.fix()
	return n
}

func joinItems(a, b *rangeItem) *rangeItem {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.prio > b.prio:
		a.right = joinItems(a.right, b)
		a.fix()
		return a
	default:
		b.left = joinItems(a, b.left)
		b.fix()
		return b
	}
}

// meeting calls f on every item whose span meets [start, end) (end nil: no bound), in order of
// start, until f returns false.
func (t *rangeTree) meeting(start, end []byte, f func(*rangeItem) bool) {
	t.meetingIn(t.root, start, end, f)
}

func (t *rangeTree) meetingIn(n *rangeItem, start, end []byte, f func(*rangeItem) bool) bool {
	if n == nil || (!n.maxUnbounded && compareKeys(n.maxEnd, start) <= 0) {
		return true // nothing below ends after start
	}
	t.steps++
	if !t.meetingIn(n.left, start, end, f) {
		return false
	}
	if end != nil && compareKeys(n.start(), end) >= 0 {
		return true // this and everything to its right start at or after end
	}
	if spansMeet(n.start(), n.end(), start, end) && !f(n) {
		return false
	}
	return t.meetingIn(n.right, start, end, f)
}

// containsAny reports whether some item's span holds key. It follows one path down: where an
// item starts after key, only its left subtree can hold key; where it starts at or before it, so
// does everything in its left subtree, and one of those holds key exactly when their largest end
// (leftEnd) is after key; otherwise only the right subtree can.
func (t *rangeTree) containsAny(key []byte) bool {
	p := prefixOf(key)
	for n := t.root; n != nil; {
		t.steps++
		c := n.startPrefix.compare(p)
		if c == 0 {
			c = compareKeys(n.start(), key)
		}
		if c > 0 {
			n = n.left
			continue
		}
		if n.leftUnbounded {
			return true
		}
		if c = n.leftEndPrefix.compare(p); c == 0 {
			c = compareKeys(n.leftEnd, key)
		}
		if c > 0 {
			return true
		}
		n = n.right
	}
	return false
}

// containing calls f on every item whose span holds key, until f returns false.
func (t *rangeTree) containing(key []byte, f func(*rangeItem) bool) {
	t.containingIn(t.root, key, f)
}

func (t *rangeTree) containingIn(n *rangeItem, key []byte, f func(*rangeItem) bool) bool {
	if n == nil || (!n.maxUnbounded && compareKeys(n.maxEnd, key) <= 0) {
		return true
	}
	t.steps++
	if !t.containingIn(n.left, key, f) {
		return false
	}
	if compareKeys(n.start(), key) > 0 {
		return true
	}
	if (n.end() == nil || compareKeys(key, n.end()) < 0) && !f(n) {
		return false
	}
	return t.containingIn(n.right, key, f)
}

// keyPrefix is the first sixteen bytes of a key, big-endian, zero-padded. Keys whose prefixes
// differ are ordered as their prefixes; keys with one prefix (a zero byte and the end of a key
// look alike) are compared whole.
type keyPrefix struct{ hi, lo uint64 }

func prefixOf(k []byte) keyPrefix {
	if len(k) < 16 {
		var b [16]byte
		copy(b[:], k)
		k = b[:]
	}
	return keyPrefix{binary.BigEndian.Uint64(k), binary.BigEndian.Uint64(k[8:])}
}

// compare is -1, 1, or 0 when the keys must be compared whole.
func (p keyPrefix) compare(q keyPrefix) int {
	switch {
	case p.hi != q.hi:
		if p.hi < q.hi {
			return -1
		}
		return 1
	case p.lo != q.lo:
		if p.lo < q.lo {
			return -1
		}
		return 1
	}
	return 0
}

// compareKeys is bytes.Compare, eight bytes at a time while both keys have them: keys of one
// column family tend to share long prefixes ("record/1…"), and the tree compares a key at every
// level, where bytes.Compare's call and setup cost more than the comparison itself.
func compareKeys(a, b []byte) int {
	for len(a) >= 8 && len(b) >= 8 {
		x, y := binary.BigEndian.Uint64(a), binary.BigEndian.Uint64(b)
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
		a, b = a[8:], b[8:]
	}
	if len(a) > 0 && len(b) > 0 && a[0] != b[0] { // most short keys differ at once
		if a[0] < b[0] {
			return -1
		}
		return 1
	}
	return bytes.Compare(a, b)
}
