package locktable

import "bytes"

// coverNode is a node of a persistent treap of spans, ordered by start then id, whose nodes know
// the largest end in their subtree. It is never changed once published: an insert or a delete
// copies the O(log R) nodes on its path, so that a key request reads the tree under its own
// shard's mutex, without the home shard's, while a range request publishes the next version.
type coverNode struct {
	start       []byte
	end, maxEnd *[]byte // its own end and the largest in its subtree; a nil end has no bound
	id          uint64
	left, right *coverNode
}

func (n *coverNode) before(start []byte, id uint64) bool {
	if c := compareKeys(n.start, start); c != 0 {
		return c < 0
	}
	return n.id < id
}

// withChildren is a copy of n with the given children and its largest end worked out again.
func (n *coverNode) withChildren(left, right *coverNode) *coverNode {
	c := *n
	c.left, c.right = left, right
	c.maxEnd = c.end
	for _, ch := range [2]*coverNode{left, right} {
		if ch != nil {
			c.maxEnd = laterEnd(c.maxEnd, ch.maxEnd)
		}
	}
	return &c
}

// coverPrio is the treap priority of the span numbered id: a hash of the number, so that the
// tree's shape does not depend on the order spans come and go.
func coverPrio(id uint64) uint64 {
	id ^= id >> 33
	id *= 0xff51afd7ed558ccd
	id ^= id >> 33
	id *= 0xc4ceb9fe1a85ec53
	return id ^ id>>33
}

// coverWith returns the tree n with the span [start, *end) numbered id added. The nodes share
// the end with the range or retired span that has it, which never changes it.
func coverWith(n *coverNode, start []byte, end *[]byte, id uint64) *coverNode {
	return insertCover(n, &coverNode{start: start, end: end, id: id})
}

// prio is the node's treap priority.
func (n *coverNode) prio() uint64 { return coverPrio(n.id) }

func insertCover(n, add *coverNode) *coverNode {
	if n == nil {
		return add.withChildren(nil, nil)
	}
	if add.prio() > n.prio() {
		l, r := splitCover(n, add.start, add.id)
		return add.withChildren(l, r)
	}
	if add.before(n.start, n.id) {
		return n.withChildren(insertCover(n.left, add), n.right)
	}
	return n.withChildren(n.left, insertCover(n.right, add))
}

// splitCover splits n into the nodes before (start, id) and the rest, copying the split path.
func splitCover(n *coverNode, start []byte, id uint64) (*coverNode, *coverNode) {
	if n == nil {
		return nil, nil
	}
	if n.before(start, id) {
		l, r := splitCover(n.right, start, id)
		return n.withChildren(n.left, l), r
	}
	l, r := splitCover(n.left, start, id)
	return l, n.withChildren(r, n.right)
}

// coverWithout returns the tree n without the span numbered id that starts at start.
func coverWithout(n *coverNode, start []byte, id uint64) *coverNode {
	if n == nil {
		return nil
	}
	switch {
	case n.id == id:
		return joinCover(n.left, n.right)
	case n.before(start, id):
		return n.withChildren(n.left, coverWithout(n.right, start, id))
	}
	return n.withChildren(coverWithout(n.left, start, id), n.right)
}

func joinCover(a, b *coverNode) *coverNode {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.prio() > b.prio():
		return a.withChildren(a.left, joinCover(a.right, b))
	}
	return b.withChildren(joinCover(a, b.left), b.right)
}

// stabs reports whether a span of n contains key: one path down the tree, as an interval tree's
// search goes. A subtree whose largest end is at or before key holds no candidate; below that, a
// left subtree whose largest end is after key holds the only candidates, or none starts at or
// before key anywhere to its right either.
func (n *coverNode) stabs(key []byte) bool {
	if n == nil || !endsAfter(n.maxEnd, key) {
		return false
	}
	for n != nil {
		c := compareKeys(n.start, key)
		if c <= 0 && endsAfter(n.end, key) {
			return true
		}
		if l := n.left; l != nil && endsAfter(l.maxEnd, key) {
			n = l
			continue
		}
		if c > 0 {
			return false
		}
		n = n.right
	}
	return false
}

// rangeCover is what a key request reads of its column family's ranges before it takes any mutex
// but its own shard's: live holds the span of every range lock and range request of the column
// family, and retiring the spans that route the orphans, the keys in the home shard that no live
// span covers (retiredSpan). It is replaced, never changed, under the home shard's mutex.
type rangeCover struct {
	live, retiring *coverNode
}

// retiredSpan is a span of the cover's retiring spans: that of a range that ended while keys it
// had brought into the home shard were still there, or of one key brought in for an owner's wait
// (orphanBrought). It stays for as long as one of its orphans does.
type retiredSpan struct {
	start, end []byte
	id         uint64
	orphans    int
}

// keyAfter is the first key after key, the end of the span that holds key alone.
func keyAfter(key []byte) []byte { return append(bytes.Clone(key), 0) }

// retire adds r, which has orphans, to next, the cover to be published.
func (sp *rangeSpace) retire(r *retiredSpan, next *rangeCover) {
	next.retiring = coverWith(next.retiring, r.start, &r.end, r.id)
}

// unorphan takes rk off its retired span's orphans, and the span out of next once it has none: a
// live span covers rk again, or rk left the home shard. It reports whether next changed.
func (rk *rangedKey) unorphan(next *rangeCover) bool {
	r := rk.retired
	rk.retired = nil
	r.orphans--
	if r.orphans > 0 {
		return false
	}
	next.retiring = coverWithout(next.retiring, r.start, r.id)
	return true
}

// coverAdd puts it's span in sp's live cover; the orphans inside it are covered again.
func (sp *rangeSpace) coverAdd(it *rangeItem) {
	cv := sp.cover.Load()
	next := &rangeCover{live: coverWith(cv.live, it.start(), it.endRef(), it.id), retiring: cv.retiring}
	it.covering = true
	if next.retiring != nil {
		sp.keysIn(it.start(), it.end(), func(e *keyEntry) bool {
			if rk := e.ranged(); rk.retired != nil {
				rk.unorphan(next)
			}
			return true
		})
	}
	sp.cover.Store(next)
}

// spanGone takes it's span out of sp's live cover, once its range lock or request has ended. The
// keys in it that no other live span covers stay in the home shard until they leave the table,
// as orphans of its span, which joins the retiring spans.
func (sp *rangeSpace) spanGone(it *rangeItem) {
	if !it.covering {
		return
	}
	it.covering = false
	cv := sp.cover.Load()
	next := &rangeCover{live: coverWithout(cv.live, it.start(), it.id), retiring: cv.retiring}
	r := &retiredSpan{start: it.start(), end: it.end(), id: it.id}
	sp.keysIn(it.start(), it.end(), func(e *keyEntry) bool {
		if rk := e.ranged(); rk.retired == nil && !next.live.stabs(rk.key) {
			rk.retired = r
			r.orphans++
		}
		return true
	})
	if r.orphans > 0 {
		sp.retire(r, next)
	}
	sp.cover.Store(next)
}

// orphanLeft takes rk, an orphan, off its retired span as it leaves the table.
func (sp *rangeSpace) orphanLeft(rk *rangedKey) {
	cv := sp.cover.Load()
	next := &rangeCover{live: cv.live, retiring: cv.retiring}
	if rk.unorphan(next) {
		sp.cover.Store(next)
	}
}

// orphanBrought makes rk, a key just brought into the home shard, an orphan with a retired span
// of its own if no live span covers it.
func (sp *rangeSpace) orphanBrought(rk *rangedKey) {
	cv := sp.cover.Load()
	if cv.live.stabs(rk.key) {
		return
	}
	r := &retiredSpan{start: rk.key, end: keyAfter(rk.key), id: sp.nextSeq(), orphans: 1}
	rk.retired = r
	next := &rangeCover{live: cv.live, retiring: cv.retiring}
	sp.retire(r, next)
	sp.cover.Store(next)
}
