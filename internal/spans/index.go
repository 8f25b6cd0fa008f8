package spans

// Index is a set of spans, each with a value, changed in place. It only grows; the zero value is
// empty and ready to use. It is not safe for concurrent use.
type Index[V any] struct {
	tree Tree[V]
}

// indexNode is an Index's node, with the span it points at.
type indexNode[V any] struct {
	Node[V]
	span Span
}

// Len is the number of spans in x.
func (x *Index[V]) Len() int { return x.tree.Len() }

// Steps counts the nodes x's searches have visited, for tests that bound their cost.
func (x *Index[V]) Steps() uint64 { return x.tree.Steps() }

// Insert adds the span [start, end) with value v. It keeps start and end, which the caller must
// not change. Spans of one start are found in the order they were inserted.
func (x *Index[V]) Insert(start, end []byte, v V) {
	n := &indexNode[V]{span: Span{Start: start, End: end}}
	n.Init(v, &n.span, uint64(x.tree.Len()+1))
	x.tree.Insert(&n.Node)
}

// Containing calls f on the value of every span that holds key, in order of start, until f
// returns false.
func (x *Index[V]) Containing(key []byte, f func(V) bool) { x.tree.Containing(key, f) }

// Meeting calls f on the value of every span that shares a key with [start, end) (end nil: no
// bound), in order of start, until f returns false.
func (x *Index[V]) Meeting(start, end []byte, f func(V) bool) { x.tree.Meeting(start, end, f) }
