package spans

// Version is one version of a persistent set of spans: it never changes once made. With and
// Without return the next version and copy the O(log n) nodes on their path, so that any number
// of goroutines may read a version while another makes the next. The zero value is empty.
type Version struct {
	root *node[struct{}]
}

// With returns v with the span [start, *end) numbered id added. It keeps start and end, which the
// caller must not change; id must be unique among v's spans.
func (v Version) With(start []byte, end *[]byte, id uint64) Version {
	return Version{insert(v.root, &node[struct{}]{start: start, end: end, id: id}, true)}
}

// Without returns v without its span numbered id, which starts at start.
func (v Version) Without(start []byte, id uint64) Version {
	return Version{remove(v.root, start, id, true)}
}

// Empty reports whether v has no span.
func (v Version) Empty() bool { return v.root == nil }

// Covers reports whether a span of v holds key, on one path down the tree.
func (v Version) Covers(key []byte) bool {
	if v.root == nil {
		return false
	}
	found, _ := covers(v.root, key)
	return found
}
