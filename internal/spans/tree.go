package spans

import "github.com/recordlock/recordlock/internal/invariants"

// Tree is a set of spans whose nodes are the caller's, changed in place: a node is in one tree at
// most. The zero value is empty and ready to use. It is not safe for concurrent use.
type Tree[V any] struct {
	root  *Node[V]
	steps invariants.Counter // the nodes its searches visited, with the tag invariants
	n     int
}

// Len is the number of spans in t.
func (t *Tree[V]) Len() int { return t.n }

// Steps counts the nodes t's searches have visited, for tests that bound their cost; in a build
// without the tag invariants, 0.
func (t *Tree[V]) Steps() uint64 { return t.steps.Load() }

// Insert adds n, made ready by Init and in no tree, to t.
func (t *Tree[V]) Insert(n *Node[V]) {
	t.root = insert(t.root, n, false)
	t.n++
}

// Remove takes n, which is in t, out of it.
func (t *Tree[V]) Remove(n *Node[V]) {
	t.root = remove(t.root, n.span.Start, n.id, false)
	n.left, n.right = nil, nil
	t.n--
}

// Covers reports whether a span of t holds key, on one path down the tree.
func (t *Tree[V]) Covers(key []byte) bool {
	return covers(t.root, key, &t.steps)
}

// Encloses reports whether one span of t holds all of [start, end) (end nil: no bound), on one
// path down the tree.
func (t *Tree[V]) Encloses(start, end []byte) bool {
	return encloses(t.root, start, end, &t.steps)
}

// Containing calls f on the value of every span that holds key, in order of start, until f
// returns false.
func (t *Tree[V]) Containing(key []byte, f func(V) bool) { containing(t.root, key, f, &t.steps) }

// Meeting calls f on the value of every span that shares a key with [start, end) (end nil: no
// bound), in order of start, until f returns false.
func (t *Tree[V]) Meeting(start, end []byte, f func(V) bool) {
	meeting(t.root, start, end, f, &t.steps)
}

// Visit is Meeting without counting its steps, for the checks of a build with the tag invariants,
// which must leave the counts that tests bound as they were.
func (t *Tree[V]) Visit(start, end []byte, f func(V) bool) {
	var uncounted invariants.Counter
	meeting(t.root, start, end, f, &uncounted)
}
