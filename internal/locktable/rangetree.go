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
	// steps counts the nodes its searches visited, for the tests that bound their cost.
	steps uint64
}

// rangeItem is a range claim's node in its column family's tree, held or queued. It is part of
// every range lock, so it keeps no copy of a key: its largest ends point at the end of the item
// that has them (a nil end has no bound), and its treap priority is a hash of its id.
type rangeItem struct {
	h *Claim
	// w is the queued request, nil once granted; its seq is the request's place in the column
	// family's order of arrival.
	w  *waiter
	id uint64 // orders items of one start: a number of nextSeq, unique in the column family

	left, right *rangeItem
	maxEnd      *[]byte // the largest end in the subtree
	// leftEnd is the largest end of the item and its left subtree: that of the items that start
	// at or before it. It answers containsAny with one comparison per level.
	leftEnd  *[]byte
	tree     *rangeTree // the tree of its rangeSet it is in, nil while in none
	covering bool       // its span is in its space's live cover (rangecover.go)
}

func (it *rangeItem) start() []byte   { return it.h.key() }
func (it *rangeItem) end() []byte     { return it.h.cold.span.end }
func (it *rangeItem) endRef() *[]byte { return &it.h.cold.span.end }
func (it *rangeItem) prio() uint64    { return coverPrio(it.id) }

// before orders items by start, then by id.
func (it *rangeItem) before(o *rangeItem) bool {
	if c := compareKeys(it.start(), o.start()); c != 0 {
		return c < 0
	}
	return it.id < o.id
}

// fix recomputes it's largest ends from its own and its children's.
func (it *rangeItem) fix() {
	it.leftEnd = it.endRef()
	if l := it.left; l != nil {
		it.leftEnd = laterEnd(it.leftEnd, l.maxEnd)
	}
	it.maxEnd = it.leftEnd
	if r := it.right; r != nil {
		it.maxEnd = laterEnd(it.maxEnd, r.maxEnd)
	}
}

// laterEnd returns the later of two ends; a nil end has no bound.
func laterEnd(a, b *[]byte) *[]byte {
	switch {
	case *a == nil:
		return a
	case *b == nil || compareKeys(*b, *a) > 0:
		return b
	}
	return a
}

// endsAfter reports whether the end e lies after key: e has no bound, or key is before it.
func endsAfter(e *[]byte, key []byte) bool { return *e == nil || compareKeys(key, *e) < 0 }

func (t *rangeTree) insert(it *rangeItem) {
	it.left, it.right, it.tree = nil, nil, t
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
		if n.left.prio() > n.prio() {
			n = rotateRight(n)
		}
	} else {
		n.right = insertItem(n.right, it)
		if n.right.prio() > n.prio() {
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
	if it.tree != t {
		return
	}
	t.root = removeItem(t.root, it)
	it.left, it.right, it.tree = nil, nil, nil
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
	case a.prio() > b.prio():
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
	if n == nil || !endsAfter(n.maxEnd, start) {
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
	for n := t.root; n != nil; {
		t.steps++
		if compareKeys(n.start(), key) > 0 {
			n = n.left
			continue
		}
		if endsAfter(n.leftEnd, key) {
			return true
		}
		n = n.right
	}
	return false
}

// holdsSpan reports whether one item's span contains all of [start, end) (end nil: no bound):
// the largest end among the items that start at or before start, found on one path down as
// containsAny finds it.
func (t *rangeTree) holdsSpan(start, end []byte) bool {
	var best *[]byte
	for n := t.root; n != nil; {
		t.steps++
		if compareKeys(n.start(), start) > 0 {
			n = n.left
			continue
		}
		if best == nil {
			best = n.leftEnd
		} else {
			best = laterEnd(best, n.leftEnd)
		}
		n = n.right
	}
	switch {
	case best == nil:
		return false
	case *best == nil:
		return true
	case end == nil:
		return false
	}
	return compareKeys(end, *best) <= 0
}

// containing calls f on every item whose span holds key, until f returns false.
func (t *rangeTree) containing(key []byte, f func(*rangeItem) bool) {
	t.containingIn(t.root, key, f)
}

func (t *rangeTree) containingIn(n *rangeItem, key []byte, f func(*rangeItem) bool) bool {
	if n == nil || !endsAfter(n.maxEnd, key) {
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
