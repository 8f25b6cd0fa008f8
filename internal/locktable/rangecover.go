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

// unorphan takes e, an orphan routed home by r, off r's orphans, and r out of next once it has
// none: a live span covers e's key again, or e left the home shard. It reports whether next
// changed.
func (sp *rangeSpace) unorphan(e *keyEntry, r *retiredSpan, next *rangeCover) bool {
	delete(sp.orphans, e)
	if len(sp.orphans) == 0 {
		sp.orphans = nil // a map keeps its size: let go of what many orphans grew
	}
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
	if len(sp.orphans) > 0 {
		sp.keysIn(it.start(), it.end(), func(e *keyEntry) bool {
			if r := sp.orphans[e]; r != nil {
				sp.unorphan(e, r, next)
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
	sp.keysIn(it.start(), it.end(), func(e *keyEntry) bool { // none is an orphan: it covered them
		if !next.live.Covers(e.homeKey()) {
			sp.orphan(e, r)
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

// orphan makes e an orphan that r routes home.
func (sp *rangeSpace) orphan(e *keyEntry, r *retiredSpan) {
	if sp.orphans == nil {
		sp.orphans = map[*keyEntry]*retiredSpan{}
	}
	sp.orphans[e] = r
	r.orphans++
}

// keyLeft takes e, an entry of the home shard that leaves the table, out of sp's index of keys,
// and off its retired span if it is an orphan.
func (sp *rangeSpace) keyLeft(e *keyEntry) {
	sp.keys.Delete(e)
	if r := sp.orphans[e]; r != nil {
		cv := sp.cover.Load()
		next := &rangeCover{live: cv.live, retiring: cv.retiring}
		if sp.unorphan(e, r, next) {
			sp.cover.Store(next)
		}
	}
}

// orphanBrought makes e, an entry just brought into the home shard, an orphan with a retired
// span of its own if no live span covers its key.
func (sp *rangeSpace) orphanBrought(e *keyEntry) {
	cv := sp.cover.Load()
	key := e.homeKey()
	if cv.live.Covers(key) {
		return
	}
	r := &retiredSpan{Span: spans.Span{Start: key, End: keyAfter(key)}, id: sp.nextSeq()}
	sp.orphan(e, r)
	next := &rangeCover{live: cv.live, retiring: cv.retiring}
	sp.retire(r, next)
	sp.cover.Store(next)
}
