package locktable

import "github.com/recordlock/recordlock/internal/spans"

// rangeTree holds the range locks and queued range requests of one column family, ordered by
// start, as a treap whose every node knows the largest end in its subtree. That is what finds the
// ranges that meet a key or a span in O(log R + m) for m found, where a tree ordered by start
// alone would step over every range that starts before the span and ends before it too; the
// ordered containers we could take (google/btree, tidwall/btree) keep no such per-subtree value.
//
// It is the treap of internal/spans (the same order and priorities) on nodes of its own: an item
// is part of its range lock and reads its start and end through its claim, where a spans node
// keeps its start, a pointer to its end and its value: 40 bytes more, which would take a range
// lock's span out of its 96-byte size class and the lock past the 384 bytes TestHeldLockMemory
// allows it.
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
func (it *rangeItem) prio() uint64    { return spans.Priority(it.id) }

// before orders items by start, then by id.
func (it *rangeItem) before(o *rangeItem) bool {
	if c := spans.Compare(it.start(), o.start()); c != 0 {
		return c < 0
	}
	return it.id < o.id
}

// fix recomputes it's largest ends from its own and its children's.
func (it *rangeItem) fix() {
	it.leftEnd = it.endRef()
	if l := it.left; l != nil {
		it.leftEnd = spans.LaterEnd(it.leftEnd, l.maxEnd)
	}
	it.maxEnd = it.leftEnd
	if r := it.right; r != nil {
		it.maxEnd = spans.LaterEnd(it.maxEnd, r.maxEnd)
	}
}

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
	if n == nil || !spans.EndsAfter(n.maxEnd, start) {
		return true // nothing below ends after start
	}
	t.steps++
	if !t.meetingIn(n.left, start, end, f) {
		return false
	}
	if end != nil && spans.Compare(n.start(), end) >= 0 {
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
		if spans.Compare(n.start(), key) > 0 {
			n = n.left
			continue
		}
		if spans.EndsAfter(n.leftEnd, key) {
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
		if spans.Compare(n.start(), start) > 0 {
			n = n.left
			continue
		}
		if best == nil {
			best = n.leftEnd
		} else {
			best = spans.LaterEnd(best, n.leftEnd)
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
	return spans.Compare(end, *best) <= 0
}

// containing calls f on every item whose span holds key, until f returns false.
func (t *rangeTree) containing(key []byte, f func(*rangeItem) bool) {
	t.containingIn(t.root, key, f)
}

func (t *rangeTree) containingIn(n *rangeItem, key []byte, f func(*rangeItem) bool) bool {
	if n == nil || !spans.EndsAfter(n.maxEnd, key) {
		return true
	}
	t.steps++
	if !t.containingIn(n.left, key, f) {
		return false
	}
	if spans.Compare(n.start(), key) > 0 {
		return true
	}
	if (n.end() == nil || spans.Compare(key, n.end()) < 0) && !f(n) {
		return false
	}
	return t.containingIn(n.right, key, f)
}
