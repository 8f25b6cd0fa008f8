package locktable

import (
	"bytes"

	"github.com/recordlock/recordlock/internal/spans"
)

// rangeCover is what a key request reads of its column family's ranges before it takes any mutex
// but its own shard's: live holds the span of every range lock and range request of the column
// family, and retiring the spans that route the orphans, the keys in the home shard that no live
// span covers (retiredSpan). It is replaced, never changed, under the home shard's mutex; its
// versions of the spans are never changed either (spans.Version), so a key request reads them
// under its own shard's mutex, without the home shard's, while a range request publishes the next.
// Their nodes point at the span of the range or retired span that has it, which never changes it.
type rangeCover struct {
	live, retiring spans.Version
}

// retiredSpan is a span of the cover's retiring spans: that of a range that ended while keys it
// had brought into the home shard were still there, or of one key brought in for an owner's wait
// (orphanBrought). It stays for as long as one of its orphans does.
type retiredSpan struct {
	spans.Span
	id      uint64
	orphans int
}

// keyAfter is the first key after key, the end of the span that holds key alone.
func keyAfter(key []byte) []byte { return append(bytes.Clone(key), 0) }

// retire adds r, which has orphans, to next, the cover to be published.
func (sp *rangeSpace) retire(r *retiredSpan, next *rangeCover) {
	next.retiring = next.retiring.With(&r.Span, r.id)
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
	next.retiring = next.retiring.Without(&r.Span, r.id)
	return true
}

// coverAdd puts it's span in sp's live cover; the orphans inside it are covered again.
func (sp *rangeSpace) coverAdd(it *rangeItem) {
	cv := sp.cover.Load()
	next := &rangeCover{live: cv.live.With(it.span(), it.ID()), retiring: cv.retiring}
	it.covering = true
	if !next.retiring.Empty() {
		sp.keysIn(it.start(), it.end(), func(e *keyEntry) bool {
			if rk := e.rangedKey; rk.retired != nil {
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
	next := &rangeCover{live: cv.live.Without(it.span(), it.ID()), retiring: cv.retiring}
	r := &retiredSpan{Span: *it.span(), id: it.ID()}
	sp.keysIn(it.start(), it.end(), func(e *keyEntry) bool {
		if rk := e.rangedKey; rk.retired == nil && !next.live.Covers(rk.key) {
			rk.retired = r
			r.orphans++
		}
		return true
	})
	if r.orphans > 0 {
		sp.retire(r, next)
	}
	sp.cover.Store(next)
	if f := sp.home.tab.ranges.hooks.spanLeft; f != nil {
		f()
	}
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
	if cv.live.Covers(rk.key) {
		return
	}
	r := &retiredSpan{Span: spans.Span{Start: rk.key, End: keyAfter(rk.key)}, id: sp.nextSeq(), orphans: 1}
	rk.retired = r
	next := &rangeCover{live: cv.live, retiring: cv.retiring}
	sp.retire(r, next)
	sp.cover.Store(next)
}
