package recordlock

import (
	"context"
	"time"
)

// Upgrading a shared handle to exclusive, for a Txn, and undoing it (docs/DESIGN.md §15.3).

// upgrade makes h, a shared handle of a Txn, exclusive: at once when its share is the only one,
// else once the other sharers are gone, waiting ahead of every request queued but earlier
// upgrades, until timeout, ctx is done or the Locker closes. The wait goes through a stand-in
// handle that carries its timeout and is what the wait graph sees. It returns ErrReleased or
// ErrLeaseExpired when h's share ends first (or had ended). On failure h is unchanged.
func (sh *shard) upgrade(ctx context.Context, h *Handle, timeout time.Duration) error {
	c := h.tenant()
	_, mono := readClock(c.clock)
	sh.mu.Lock()
	if c.closed.Load() {
		sh.mu.Unlock()
		return ErrClosed
	}
	if err := h.deadErr(sh); err != nil {
		sh.unlockAndRunHooks()
		return err
	}
	e := h.e
	if h.flags()&flagShared == 0 {
		sh.mu.Unlock()
		return nil
	}
	sh.settleOtherSharers(e, h, c, mono)
	if e.shares == 1 {
		e.shares = 0
		h.clearFlags(flagShared)
		sh.unlockAndRunHooks()
		return nil
	}
	stand := &Handle{l: h.l, keyPtr: h.keyPtr, keyLen: h.keyLen, heapIdx: -1, hash: h.hash, cf: h.cf, owner: h.owner}
	w := &waiter{h: stand, since: mono, wake: make(chan struct{}, 1), upgrade: h}
	sh.enqueueUpgrade(e, w)
	err := sh.sleep(ctx, e, w, monoAfter(mono, timeout))
	if err == errGrantedAfterClose {
		err = ErrClosed // Close releases h
	}
	return err
}

// settleOtherSharers settles the lapsed sharers of e other than h, at mono on c's clock, so that
// a sole live sharer upgrades at once.
func (sh *shard) settleOtherSharers(e *keyEntry, h *Handle, c *tenant, mono time.Duration) {
	var lapsed []*Handle
	for _, o := range e.appendHolders(nil) {
		if o != h && o.flags()&flagExpired == 0 && o.lapsedAt(o.monoFor(c, mono)) {
			lapsed = append(lapsed, o)
		}
	}
	for _, o := range lapsed {
		o.settleFor(sh, c, mono)
	}
}

// downgrade makes h shared again, undoing an upgrade; if h still holds its key, the shared
// requests at the head of the queue join it.
func (sh *shard) downgrade(h *Handle) {
	sh.mu.Lock()
	if h.flags()&flagShared == 0 {
		e := h.e
		if e != nil && e.heldExclusively() && e.holder == h {
			e.shares = 1
			h.state.Store(h.flags()&flagBits | flagShared) // in the holder slot, place 0
			sh.serve(e)
		} else {
			h.setFlags(flagShared)
		}
	}
	sh.unlockAndRunHooks()
}
