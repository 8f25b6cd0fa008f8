package locktable

import "time"

// How a claim ends: released by its holder or its owner, revoked, or found lapsed; and what its
// holder reads of that (Done, Now, the error of a dead claim).

// Disown ends h's ownership by its owner, when the owner ends. A live claim that does not outlive
// its owner (flagHold) is released first, and with release any live claim is.
func (h *Claim) Disown(release bool) {
	if !h.dead() && (release || h.flags()&flagHold == 0) {
		h.Release()
	}
	if h.owner == nil {
		return
	}
	sh := h.lockShard()
	h.ten.tab.checks.disowned(h)
	h.owner = nil
	sh.mu.Unlock()
}

// closedChan is what Done returns for a claim that is already dead.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Done returns a channel that is closed as soon as h stops authorizing writes: release, lease
// lapse or revocation.
func (h *Claim) Done() <-chan struct{} {
	sh := h.lockShard()
	defer sh.unlockAndRunDeferred()
	if h.dead() || h.settle(sh) {
		return closedChan
	}
	c := h.coldPart()
	if c.done == nil {
		c.done = make(chan struct{})
		sh.watch(h) // the channel must close at the deadline
	}
	return c.done
}

// Now returns h's status evaluated now: a deadline found passed, and found passed again under the
// shard mutex, counts as expired, and if the claim still held its key the expiry is completed
// first (the key goes back and the release hook fires). A deadline read without the mutex may be
// one an Extend that found the lease live is replacing: reporting that lapse unsettled would let
// a Fence run after Now said the lease ended. So Now().dead() reports that h can no longer authorize a new write (released, revoked
// or lapsed), and Now().Expired() that its lease has ended, by lapse or revocation, which a
// Release alone does not make true.
func (h *Claim) Now() Status {
	f := h.flags()
	if f&flagExpired != 0 || !h.lapsed() {
		return Status(f & flagBits)
	}
	return h.settleNow()
}

// Release gives the key back. It returns true the first time; false when h was already released,
// expired or revoked, or is past its deadline (it then completes the expiry). If another
// goroutine is inside a fence on h, Release waits for the fence to end.
func (h *Claim) Release() bool {
	hash := h.hashNow()
	sh := h.ten.tab.shard(hash)
	// The clock is read before the mutex, which keeps the read out of the critical section that
	// every lock and release of the shard's keys queues behind. Release takes effect at that
	// reading: an expiry anyone observed since then was settled under the mutex and is seen below.
	// Waiting out a fence can take long, so the clock is read again after one.
	now := h.ten.clock.Mono()
	sh.mu.Lock()
	inOwnFence := false
	if h.hash != hash || h.flags()&flagFencing != 0 { // lockForChange, its common case spelled out
		sh.mu.Unlock()
		var waited bool
		if sh, waited, inOwnFence = h.lockForChange(); waited {
			now = h.ten.clock.Mono()
		}
	}
	ok := !h.dead() && !h.settleAt(sh, now)
	switch {
	case ok && inOwnFence:
		h.releaseInOwnFence(sh)
	case ok:
		h.releaseLocked(sh)
	}
	sh.unlockAndRunDeferred()
	return ok
}

// releaseLocked gives back the key of a live holder, with the shard mutex held.
func (h *Claim) releaseLocked(sh *shard) {
	sh.unschedule(h)
	sh.giveBack(h, flagReleased)
	h.closeDone() // after the flag: a reader woken by Done finds the claim released
	sh.deferHook(h)
}

// Revoke ends h's authority ahead of its lease. If the key is still held it is given back and the
// release hook fires; after a Release it only settles the flag. It waits for a fence running in
// another goroutine. Idempotent.
func (h *Claim) Revoke() {
	sh, _, inOwnFence := h.lockForChange()
	if h.flags()&flagExpired == 0 {
		h.setFlags(flagExpired)
		sh.counts.revoked++
		sh.unschedule(h)
		h.closeDone()
		switch {
		case h.flags()&flagHeld == 0:
		case inOwnFence:
			h.setFlags(flagPassOnAfterFence)
		default:
			sh.giveBack(h, 0)
			sh.deferHook(h)
		}
	}
	sh.unlockAndRunDeferred()
}

// moveDeadline sets a live holder's lease deadline and moves its timer, if it has one, with the
// shard mutex held.
func (h *Claim) moveDeadline(deadline time.Duration) {
	h.deadline.Store(int64(deadline))
	if h.heapIdx >= 0 {
		h.shard().reschedule(h)
	}
}

// deadErr is nil while h authorizes writes, else the error that says why not (ErrLeaseExpired or
// ErrReleased), with the shard mutex held.
func (h *Claim) deadErr() error {
	f := h.flags()
	switch {
	case f&flagExpired != 0:
		return ErrLeaseExpired
	case f&flagReleased != 0:
		return ErrReleased
	case h.settle(h.shard()):
		return ErrLeaseExpired
	}
	return nil
}
