package locktable

import (
	"context"
	"time"
)

// Upgrading a shared range lock to exclusive (docs/DESIGN.md §17): as a key's upgrade, it waits
// only for the conflicting holders, ahead of every queued request, through a stand-in request
// over the same range that the wait graph sees.

// upgradeRange is Upgrade of a shared range lock, entered with sh's mutex held and returning
// with it released; stand is the stand-in its wait goes through, made a request over h's range
// here.
func (sh *shard) upgradeRange(ctx context.Context, h, stand *Claim, mono, deadline time.Duration) error {
	c := h.ten
	sp := sh.spaces[h.cf]
	stand.state.Store(flagRange)
	stand.cold = &Cold{span: &span{Span: h.cold.span.Span}}
	it := &stand.cold.span.item
	it.ready(stand, sp.nextSeq())
	if !sp.rangeBlocked(sh, stand, 0, true, c, mono) {
		h.clearFlags(flagShared)
		sp.ranges.refile(&h.cold.span.item)
		sh.unlockAndRunDeferred()
		return nil
	}
	w := &waiter{h: stand, since: mono, wake: make(chan struct{}, 1), upgrade: h, space: sp}
	it.w = w // seq 0: ahead of every request but the upgrades queued before it
	sp.ranges.insert(it)
	at := 0
	for at < len(sp.queue) && sp.queue[at].w.seq == 0 {
		at++
	}
	sp.queue = append(sp.queue, nil)
	copy(sp.queue[at+1:], sp.queue[at:])
	sp.queue[at] = it
	return sh.sleep(ctx, nil, w, deadline)
}

// finishRangeUpgrade ends it, a queued range upgrade: granted, its claim becomes exclusive; or its
// share ended first.
func (sh *shard) finishRangeUpgrade(sp *rangeSpace, it *rangeItem, mono time.Duration) {
	w := it.w
	sh.unqueueGrantedRange(sp, it, mono)
	sp.ranges.remove(it)
	it.w = nil
	w.upgrade.clearFlags(flagShared) // not a new grant
	sp.ranges.refile(&w.upgrade.cold.span.item)
	w.finish(waitGranted)
}

// upgradeOfRange returns the upgrade queued for h, a shared range lock of sp, or nil.
func (sp *rangeSpace) upgradeOfRange(h *Claim) *waiter {
	for _, it := range sp.queue {
		if it.w.seq != 0 {
			break
		}
		if it.w.upgrade == h {
			return it.w
		}
	}
	return nil
}
