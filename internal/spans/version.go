package spans

import "github.com/recordlock/recordlock/internal/invariants"

// Version is one version of a persistent set of spans: it never changes once made. With and
// Without return the next version and copy the O(log n) nodes on their path, so that any number
// of goroutines may read a version while another makes the next. The zero value is empty.
type Version struct {
	root *Node[struct{}]
	// overlapping is false while no two spans share a key, as ranges held apart from each other
	// are: Covers then reads one span, the last to start at or before the key, instead of the
	// largest end on every turn right. A span that meets a neighbour sets it, and it stays set
	// until the version is empty, since telling that the last overlap has left would cost a walk
	// of every span.
	overlapping bool
}

// With returns v with the span s numbered id added. It keeps s, which the caller must not change;
// id must be unique among v's spans, and s must not be empty (an End after its Start, or none).
func (v Version) With(s *Span, id uint64) Version {
	return Version{
		root:        insert(v.root, &Node[struct{}]{span: s, id: id}, true),
		overlapping: v.overlapping || meetsNeighbours(v.root, s, id),
	}
}

// Without returns v without its span s numbered id.
func (v Version) Without(s *Span, id uint64) Version {
	root := remove(v.root, s.Start, id, true)
	return Version{root: root, overlapping: v.overlapping && root != nil}
}

// meetsNeighbours reports whether s, numbered id and not in the tree n, shares a key with the span
// that comes before it in the tree or with the one after it: in a tree of spans that share no
// key, only those two can, since a span that reached past either would share a key with it too.
// It follows the one path down that finds both.
func meetsNeighbours[V any](n *Node[V], s *Span, id uint64) bool {
	var before, after *Node[V]
	for n != nil {
		if n.before(s.Start, id) {
			before, n = n, n.right
		} else {
			after, n = n, n.left
		}
	}
	return before != nil && endsAfter(&before.span.End, s.Start) ||
		after != nil && endsAfter(&s.End, after.span.Start)
}

// Empty reports whether v has no span.
func (v Version) Empty() bool { return v.root == nil }

// Covers reports whether a span of v holds key, on one path down the tree.
func (v Version) Covers(key []byte) bool {
	var uncounted invariants.Counter // v is read concurrently: its searches count nothing
	if !v.overlapping {
		return coversApart(v.root, key, &uncounted)
	}
	return covers(v.root, key, &uncounted)
}

// Each calls f on every span of v with its number, in order of start, until f returns false, for
// the checks of a build with the tag invariants.
func (v Version) Each(f func(s *Span, id uint64) bool) { each(v.root, f) }

// each is Each of the tree n; it reports whether f never returned false.
func each[V any](n *Node[V], f func(s *Span, id uint64) bool) bool {
	return n == nil || each(n.left, f) && f(n.span, n.id) && each(n.right, f)
}
