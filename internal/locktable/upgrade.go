package locktable

import (
	"context"
	"time"
)

// Upgrading a shared handle to exclusive, for a Txn, and undoing it (docs/DESIGN.md §15.3).

// Upgrade makes h, a shared claim of an owner, exclusive: at once when its share is the only one,
// else once the other sharers are gone, waiting ahead of every request queued but earlier
// upgrades, until timeout passes (with ctxBounds and a ctx deadline, as Acquire: until ctx's
// deadline), ctx is done or the tenant closes. The wait goes through a stand-in claim that
// carries its timeout and is what the wait graph sees. It returns ErrReleased or ErrLeaseExpired
// when h's share ends first (or had ended), and else fails as Acquire does. On failure h is
// unchanged. On success it returns an Undo that makes h shared again (none if h was exclusive
// already).
func (h *Claim) Upgrade(ctx context.Context, timeout time.Duration, ctxBounds bool) (Undo, error) {
	if changed, err := h.upgrade(ctx, timeout, ctxBounds); err != nil || !changed {
		return Undo{}, err
	}
	return Undo{h: h, upgrade: true}, nil
}

// upgrade is Upgrade; it reports whether h was shared.
func (h *Claim) upgrade(ctx context.Context, timeout time.Duration, ctxBounds bool) (bool, error) {
	c := h.ten
	_, mono := ReadClock(c.clock)
	deadline := waitDeadline(ctx, mono, timeout, ctxBounds)
	for {
		sh := h.lockShard()
		if c.closed.Load() {
			sh.mu.Unlock()
			return false, ErrClosed
		}
		if err := h.deadErr(); err != nil {
			sh.unlockAndRunDeferred()
			return false, err
		}
		if h.flags()&flagShared == 0 {
			sh.mu.Unlock()
			return false, nil
		}
		stand := &Claim{ten: h.ten, keyPtr: h.keyPtr, keyLen: h.keyLen, heapIdx: -1, cf: h.cf, owner: h.owner}
		stand.hash = h.hash
		var err error
		if h.flags()&flagRange != 0 {
			err = sh.upgradeRange(ctx, h, stand, mono, deadline)
		} else {
			err = sh.upgradeKey(ctx, h, stand, mono, deadline)
		}
		switch err {
		case errRouteAgain:
			continue // the key was brought into the home shard to wait there
		case ErrGrantedAfterClose:
			err = ErrClosed // Close releases h
		}
		return true, err
	}
}

// upgradeKey is Upgrade of a key's share, entered with sh's mutex held and returning with it
// released; stand is the stand-in its wait would go through, until deadline. An owner's upgrade
// that must wait while its column family has a range space waits in the home shard, as an owner's
// key request does (takeBusyLocked): a request there passes one that waits for its owner through
// the waits of other owners (rangepass.go), which it must see. It brings the key in and returns
// errRouteAgain, and Upgrade starts again in the home shard.
func (sh *shard) upgradeKey(ctx context.Context, h, stand *Claim, mono, deadline time.Duration) error {
	c, e := h.ten, h.e
	sh.settleOtherSharers(e, h, c, mono)
	if e.shares == 1 && (e.space == nil || !e.space.keyBlocked(sh, stand, 0, false, c, mono)) {
		e.shares = 0
		h.clearFlags(flagShared)
		sh.unlockAndRunDeferred()
		return nil
	}
	if e.space == nil && h.owner != nil {
		if sp := sh.tab.spaceOf(h.cf); sp != nil {
			stand.routeHomeLocked(sh, sp, true).unlockAndRunDeferred()
			return errRouteAgain
		}
	}
	w := &waiter{h: stand, since: mono, wake: make(chan struct{}, 1), upgrade: h}
	sh.enqueueUpgrade(e, w)
	return sh.sleep(ctx, e, w, deadline)
}

// settleOtherSharers settles every lapsed sharer of e other than h, at mono on c's clock: so that a
// sole live sharer upgrades at once, and so that an exclusive request that queues leaves no lapsed
// share counted as held (settleHolders). It reports whether it ended a lease just now.
func (sh *shard) settleOtherSharers(e *keyEntry, h *Claim, c *Tenant, mono time.Duration) bool {
	var lapsed []*Claim
	for _, o := range e.appendHolders(nil) {
		sh.counts.sharersRead.Inc()
		if o != h && o.lapsedFor(c, mono) {
			lapsed = append(lapsed, o)
		}
	}
	for _, o := range lapsed {
		o.endIfLapsed(sh, c, mono)
	}
	return len(lapsed) > 0
}

// downgrade makes h shared again, undoing an Upgrade; if h still holds its key, the shared
// requests at the head of the queue join it.
func (h *Claim) downgrade() {
	sh := h.lockShard()
	if h.flags()&flagShared == 0 {
		e := h.e
		if e != nil && e.heldExclusively() && e.holder == h {
			e.shares = 1
			h.state.Store(h.flags()&flagBits | flagShared) // in the holder slot, place 0
			sh.serve(e)
		} else {
			h.setFlags(flagShared)
			if h.isRange() { // its place among the ranges is by mode
				sh.spaces[h.cf].ranges.refile(&h.cold.span.item)
			}
		}
	}
	sh.unlockAndRunDeferred()
}
