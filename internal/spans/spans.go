// Package spans indexes half-open spans of bytewise-ordered keys, [start, end) with a nil end for
// no upper bound, so that the spans holding a key or meeting a span are found in O(log n + k) for
// k found. A Txn keeps its range locks in one, so that finding the range that covers a key among
// its m ranges costs O(log m), not a scan of them.
//
// An Index is a treap ordered by start whose every node knows the largest end in its subtree: a
// tree ordered by start alone would step over every span that starts before the key and ends
// before it too. It only grows; the zero value is empty and ready to use.
package spans

import "bytes"

// Index is a set of spans, each with a value. It is not safe for concurrent use.
type Index[V any] struct {
	root  *node[V]
	rnd   uint64 // the state of the priorities' generator
	n     int
	steps uint64 // the nodes the searches visited
}

type node[V any] struct {
	start, end   []byte
	v            V
	left, right  *node[V]
	prio         uint64
	maxEnd       []byte // the largest end in the subtree, unless maxUnbounded
	maxUnbounded bool
}

// Len is the number of spans in x.
func (x *Index[V]) Len() int { return x.n }

// Steps counts the nodes x's searches have visited, for tests that bound their cost.
func (x *Index[V]) Steps() uint64 { return x.steps }

// Insert adds the span [start, end) with value v. It keeps start and end, which the caller must
// not change.
func (x *Index[V]) Insert(start, end []byte, v V) {
	x.rnd = x.rnd*6364136223846793005 + 1442695040888963407
	x.root = insert(x.root, &node[V]{start: start, end: end, v: v, prio: x.rnd>>1 | 1})
	x.n++
}

func insert[V any](n, add *node[V]) *node[V] {
	if n == nil {
		add.fix()
		return add
	}
	if bytes.Compare(add.start, n.start) < 0 {
		n.left = insert(n.left, add)
		if n.left.prio > n.prio {
			l := n.left
			n.left, l.right = l.right, n
			n.fix()
			n = l
		}
	} else {
		n.right = insert(n.right, add)
		if n.right.prio > n.prio {
			r := n.right
			n.right, r.left = r.left, n
			n.fix()
			n = r
		}
	}
	n.fix()
	return n
}

// fix recomputes n's largest end from its own and its children's.
func (n *node[V]) fix() {
	n.maxEnd, n.maxUnbounded = n.end, n.end == nil
	for _, c := range []*node[V]{n.left, n.right} {
		switch {
		case c == nil || n.maxUnbounded:
		case c.maxUnbounded:
			n.maxEnd, n.maxUnbounded = nil, true
		case bytes.Compare(c.maxEnd, n.maxEnd) > 0:
			n.maxEnd = c.maxEnd
		}
	}
}

// Containing calls f on the value of every span that holds key, in order of start, until f
// returns false.
func (x *Index[V]) Containing(key []byte, f func(V) bool) {
	x.containing(x.root, key, f)
}

func (x *Index[V]) containing(n *node[V], key []byte, f func(V) bool) bool {
	if n == nil || !n.maxUnbounded && bytes.Compare(n.maxEnd, key) <= 0 {
		return true // nothing below ends after key
	}
	x.steps++
	if !x.containing(n.left, key, f) {
		return false
	}
	if bytes.Compare(n.start, key) > 0 {
		return true // this and everything to its right start after key
	}
	if (n.end == nil || bytes.Compare(key, n.end) < 0) && !f(n.v) {
		return false
	}
	return x.containing(n.right, key, f)
}

// Meeting calls f on the value of every span that shares a key with [start, end) (end nil: no
// bound), in order of start, until f returns false.
func (x *Index[V]) Meeting(start, end []byte, f func(V) bool) {
	x.meeting(x.root, start, end, f)
}

func (x *Index[V]) meeting(n *node[V], start, end []byte, f func(V) bool) bool {
	if n == nil || !n.maxUnbounded && bytes.Compare(n.maxEnd, start) <= 0 {
		return true
	}
	x.steps++
	if !x.meeting(n.left, start, end, f) {
		return false
	}
	if end != nil && bytes.Compare(n.start, end) >= 0 {
		return true
	}
	if (n.end == nil || bytes.Compare(start, n.end) < 0) && !f(n.v) {
		return false
	}
	return x.meeting(n.right, start, end, f)
}
