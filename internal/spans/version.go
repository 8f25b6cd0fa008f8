package spans

import "github.com/recordlock/recordlock/internal/invariants"

// Version is one version of a persistent set of spans: it never changes once made. With and
// Without return the next version and copy the O(log n) nodes on their path, so that any number
// of goroutines may read a version while another makes the next. The zero value is empty.
type Version struct {
	root *Node[struct{}]
}

// With returns v with the span s numbered id added. It keeps s, which the caller must not change;
// id must be unique among v's spans.
func (v Version) With(s *Span, id uint64) Version {
	return Version{insert(v.root, &Node[struct{}]{span: s, id: id}, true)}
}

// Without returns v without its span s numbered id.
func (v Version) Without(s *Span, id uint64) Version {
	return Version{remove(v.root, s.Start, id, true)}
}

// Empty reports whether v has no span.
func (v Version) Empty() bool { return v.root == nil }

// Covers reports whether a span of v holds key, on one path down the tree.
func (v Version) Covers(key []byte) bool {
	var uncounted invariants.Counter // v is read concurrently: its searches count nothing
	return covers(v.root, key, &uncounted)
}

// Each calls f on every span of v with its number, in order of start, until f returns false, for
// the checks of a build with the tag invariants.
func (v Version) Each(f func(s *Span, id uint64) bool) { each(v.root, f) }

// each is Each of the tree n; it reports whether f never returned false.
func each[V any](n *Node[V], f func(s *Span, id uint64) bool) bool {
	return n == nil || each(n.left, f) && f(n.span, n.id) && each(n.right, f)
}
