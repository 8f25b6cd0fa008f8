package spans

// Index is a set of spans, each with a value, changed in place. It only grows; the zero value is
// empty and ready to use. It is not safe for concurrent use.
type Index[V any] struct {
	root  *node[V]
	n     int
	steps uint64 // the nodes its searches visited
}

// indexNode is an Index's node, with the end it points at.
type indexNode[V any] struct {
	node[V]
	spanEnd []byte
}

// Len is the number of spans in x.
func (x *Index[V]) Len() int { return x.n }

// Steps counts the nodes x's searches have visited, for tests that bound their cost.
func (x *Index[V]) Steps() uint64 { return x.steps }

// Insert adds the span [start, end) with value v. It keeps start and end, which the caller must
// not change. Spans of one start are found in the order they were inserted.
func (x *Index[V]) Insert(start, end []byte, v V) {
	x.n++
	n := &indexNode[V]{spanEnd: end}
	n.node = node[V]{value: v, start: start, end: &n.spanEnd, id: uint64(x.n)}
	x.root = insert(x.root, &n.node, false)
}

// Containing calls f on the value of every span that holds key, in order of start, until f
// returns false.
func (x *Index[V]) Containing(key []byte, f func(V) bool) { containing(x.root, key, f, &x.steps) }

// Meeting calls f on the value of every span that shares a key with [start, end) (end nil: no
// bound), in order of start, until f returns false.
func (x *Index[V]) Meeting(start, end []byte, f func(V) bool) {
	meeting(x.root, start, end, f, &x.steps)
}
