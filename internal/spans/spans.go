// Package spans indexes half-open spans of bytewise-ordered keys, [start, end) with a nil end for
// no upper bound, so that the spans holding a key or meeting a span are found in O(log n + k) for
// k found. A Txn keeps its range locks in an Index, so that finding the range that covers a key
// among its m ranges costs O(log m), not a scan of them; a column family's range space publishes
// the spans that route key requests (its cover) as Versions, which goroutines read without a lock,
// and keeps its range locks and queued range requests in Trees whose nodes are part of them.
//
// All three are one treap (this file), ordered by start, then by a number unique among its spans,
// whose every node knows the largest end in its subtree: a tree ordered by start alone would step
// over every span that starts before the key and ends before it too. A node's priority is a hash
// of its number, so that the tree's shape depends only on its spans, not on the order they came
// and went. A Tree and an Index change their nodes in place; a Version copies the nodes on the
// path of a change, so that its earlier versions never change.
package spans

import (
	"bytes"
	"encoding/binary"

	"github.com/recordlock/recordlock/internal/invariants"
)

// Span is the span [Start, End) of keys; a nil End has no bound. A node points at its span rather
// than keep a copy of it, so that a range lock and each version of its column family's cover
// share the lock's span.
type Span struct {
	Start, End []byte
}

// Node is a span's place in a tree: a value, which the tree's searches hand to their callbacks,
// the span, whose bounds must not change while the node is in a tree, the number that orders it
// among the spans of one start, and the tree's links. It may be part of a larger struct (a range
// lock's node is). Its zero value is in no tree.
type Node[V any] struct {
	Value       V
	span        *Span
	id          uint64
	left, right *Node[V]
	maxEnd      *[]byte // the largest end in the subtree: the End of the span that has it
}

// Init readies n, which is in no tree, to go in one with the value v, as the span s numbered id.
// It keeps s; id must be unique among the spans of the tree n goes in.
func (n *Node[V]) Init(v V, s *Span, id uint64) {
	*n = Node[V]{Value: v, span: s, id: id}
}

// ID is the number n was given.
func (n *Node[V]) ID() uint64 { return n.id }

// before reports whether n comes before the span of start numbered id: by start, then number.
func (n *Node[V]) before(start []byte, id uint64) bool {
	c := Compare(n.span.Start, start)
	return c < 0 || c == 0 && n.id < id
}

// priority is the treap priority of the span numbered id: a hash of the number, so that a treap's
// shape does not depend on the order its spans come and go.
func priority(id uint64) uint64 {
	id ^= id >> 33
	id *= 0xff51afd7ed558ccd
	id ^= id >> 33
	id *= 0xc4ceb9fe1a85ec53
	return id ^ id>>33
}

// fix recomputes n's largest end from its own and its children's.
func (n *Node[V]) fix() {
	n.maxEnd = &n.span.End
	if l := n.left; l != nil {
		n.maxEnd = later(n.maxEnd, l.maxEnd)
	}
	if r := n.right; r != nil {
		n.maxEnd = later(n.maxEnd, r.maxEnd)
	}
}

// later returns the later of two ends; a nil end has no bound.
func later(a, b *[]byte) *[]byte {
	switch {
	case *a == nil:
		return a
	case *b == nil || Compare(*b, *a) > 0:
		return b
	}
	return a
}

// endsAfter reports whether the end e lies after key: e has no bound, or key is before it.
func endsAfter(e *[]byte, key []byte) bool { return *e == nil || Compare(key, *e) < 0 }

// The changes below serve both kinds of tree: with cow false they change the nodes on their path
// in place (a Tree); with cow true they change copies of them (own), so that every earlier root
// still has the tree it had (a Version). Either way the treap they make is the one of its spans.

// own returns n to be changed: n itself, or with cow a copy of it.
func own[V any](n *Node[V], cow bool) *Node[V] {
	if cow {
		c := *n
		return &c
	}
	return n
}

// insert returns the tree n with add, which is in none, in it.
func insert[V any](n, add *Node[V], cow bool) *Node[V] {
	if n == nil || priority(add.id) > priority(n.id) {
		add.left, add.right = split(n, add.span.Start, add.id, cow)
		add.fix()
		return add
	}
	n = own(n, cow)
	if n.before(add.span.Start, add.id) {
		n.right = insert(n.right, add, cow)
	} else {
		n.left = insert(n.left, add, cow)
	}
	n.fix()
	return n
}

// split splits the tree n into its nodes before the span of start numbered id and the rest.
func split[V any](n *Node[V], start []byte, id uint64, cow bool) (before, rest *Node[V]) {
	if n == nil {
		return nil, nil
	}
	n = own(n, cow)
	if n.before(start, id) {
		n.right, rest = split(n.right, start, id, cow)
		n.fix()
		return n, rest
	}
	before, n.left = split(n.left, start, id, cow)
	n.fix()
	return before, n
}

// remove returns the tree n without its node numbered id, which starts at start.
func remove[V any](n *Node[V], start []byte, id uint64, cow bool) *Node[V] {
	switch {
	case n == nil:
		return nil
	case n.id == id:
		return join(n.left, n.right, cow)
	}
	n = own(n, cow)
	if n.before(start, id) {
		n.right = remove(n.right, start, id, cow)
	} else {
		n.left = remove(n.left, start, id, cow)
	}
	n.fix()
	return n
}

// join returns the tree of the nodes of a and b, all of a's before all of b's.
func join[V any](a, b *Node[V], cow bool) *Node[V] {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case priority(a.id) > priority(b.id):
		a = own(a, cow)
		a.right = join(a.right, b, cow)
		a.fix()
		return a
	}
	b = own(b, cow)
	b.left = join(a, b.left, cow)
	b.fix()
	return b
}

// The searches below count the nodes they visit in steps, for the tests that bound their cost (in
// a build with the tag invariants; without it a Counter counts nothing).

// covers reports whether a span of the tree n holds key. It follows one path down: where a node
// starts after key, only its left subtree can hold key; where it starts at or before it, so does
// everything in its left subtree, and one of those holds key exactly when their largest end is
// after key; otherwise only the right subtree can.
func covers[V any](n *Node[V], key []byte, steps *invariants.Counter) bool {
	for ; n != nil; steps.Inc() {
		if Compare(n.span.Start, key) > 0 {
			n = n.left
			continue
		}
		if endsAfter(&n.span.End, key) || n.left != nil && endsAfter(n.left.maxEnd, key) {
			steps.Inc()
			return true
		}
		n = n.right
	}
	return false
}

// coversApart is covers of a tree whose spans share no key: only the last span to start at or
// before key can hold it, so one comparison a level finds it, and one more reads its end.
func coversApart[V any](n *Node[V], key []byte, steps *invariants.Counter) bool {
	var last *Node[V]
	for ; n != nil; steps.Inc() {
		if Compare(n.span.Start, key) > 0 {
			n = n.left
		} else {
			last, n = n, n.right
		}
	}
	return last != nil && endsAfter(&last.span.End, key)
}

// encloses reports whether one span of the tree n holds all of [start, end) (end nil: no bound):
// the largest end among the spans that start at or before start, found on one path down as covers
// finds it.
func encloses[V any](n *Node[V], start, end []byte, steps *invariants.Counter) bool {
	var best *[]byte
	for ; n != nil; steps.Inc() {
		if Compare(n.span.Start, start) > 0 {
			n = n.left
			continue
		}
		if best == nil {
			best = &n.span.End
		} else {
			best = later(best, &n.span.End)
		}
		if n.left != nil {
			best = later(best, n.left.maxEnd)
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
	return Compare(end, *best) <= 0
}

// containing calls f on the value of every span of the tree n that holds key, in order, until f
// returns false, adding the nodes it visits to steps; it reports whether f never did.
func containing[V any](n *Node[V], key []byte, f func(V) bool, steps *invariants.Counter) bool {
	if n == nil || !endsAfter(n.maxEnd, key) {
		return true // nothing below ends after key
	}
	steps.Inc()
	if !containing(n.left, key, f, steps) {
		return false
	}
	if Compare(n.span.Start, key) > 0 {
		return true // this and everything to its right start after key
	}
	if endsAfter(&n.span.End, key) && !f(n.Value) {
		return false
	}
	return containing(n.right, key, f, steps)
}

// meeting calls f on the value of every span of the tree n that shares a key with [start, end)
// (end nil: no bound), in order, until f returns false, adding the nodes it visits to steps; it
// reports whether f never did.
func meeting[V any](n *Node[V], start, end []byte, f func(V) bool, steps *invariants.Counter) bool {
	if n == nil || !endsAfter(n.maxEnd, start) {
		return true // nothing below ends after start
	}
	steps.Inc()
	if !meeting(n.left, start, end, f, steps) {
		return false
	}
	if end != nil && Compare(n.span.Start, end) >= 0 {
		return true // this and everything to its right start at or after end
	}
	if endsAfter(&n.span.End, start) && !f(n.Value) {
		return false
	}
	return meeting(n.right, start, end, f, steps)
}

// Compare is bytes.Compare, eight bytes at a time while both keys have them: keys of one column
// family tend to share long prefixes ("record/1…"), and a tree compares a key at every level,
// where bytes.Compare's call and setup cost more than the comparison itself.
func Compare(a, b []byte) int {
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
