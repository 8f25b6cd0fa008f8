package locktable

// Fencing: a commit runs only while the lease is live, and the key stays with the claim until the
// commit returns (docs/DESIGN.md §5). Fence, FenceTrusted and FenceTrustedThenRelease run the
// commit through fence, between beginFence and endFence.
//
// A commit that calls Release, Revoke or a Fence on its own claim would wait for itself. The
// fence of a commit that runs user code (Fence) says so on the claim and marks the stack
// (commitframe.go), so that such a call from inside a user's commit does not wait: a Release or
// Revoke takes effect at once and the key passes on when the commit returns, as when the lease
// lapses inside the fence; a nested Fence fails with ErrFenceInOwnFence.

// lockForChange takes the shard mutex for Release or Revoke, first waiting for a running fence
// to end, whatever the claim's state: a lease that lapsed inside a fence still has its commit in
// flight. It reports whether it had to wait, and whether the fence is still running because the
// caller may be its commit (inOwnFence).
func (h *Claim) lockForChange() (sh *shard, waited, inOwnFence bool) {
	sh = h.lockShard()
	for h.flags()&flagFencing != 0 {
		if h.fencedByCaller() {
			return sh, waited, true
		}
		sh = h.awaitFenceEnd(sh)
		waited = true
	}
	return sh, waited, false
}

// fencedByCaller reports, with the shard mutex held and a fence running on h, whether that fence
// runs a user's commit and the caller is inside a user's commit: then waiting could be waiting
// for itself.
func (h *Claim) fencedByCaller() bool {
	c := h.cold
	return c != nil && c.userFence && userCommitsOnStack(true) > 0
}

// releaseInOwnFence is Release called by the commit of h's running fence, with the shard mutex
// held: h stops authorizing writes now, and endFence passes the key on.
func (h *Claim) releaseInOwnFence(sh *shard) {
	sh.unschedule(h)
	h.setFlags(flagReleased | flagPassOnAfterFence)
	h.closeDone()
}

// awaitFenceEnd, entered with sh's mutex held, releases it until the running fence ends, then
// takes the mutex of h's shard again and returns that shard.
func (h *Claim) awaitFenceEnd(sh *shard) *shard {
	c := h.coldPart()
	if c.fenceEnd == nil {
		c.fenceEnd = make(chan struct{})
	}
	end := c.fenceEnd
	sh.mu.Unlock()
	<-end
	return h.lockShard()
}

// Fence runs commit only while h's lease is live, and keeps the key from passing to another
// holder until commit returns. commit may call back into h, so the fence marks itself as a
// user's (see fencedByCaller). It returns commit's error, or without calling commit
// ErrLeaseExpired when the lease has ended, ErrClosed when h was released and its tenant is
// closed, and ErrFenceInOwnFence when the caller is the commit of h's running fence.
func (h *Claim) Fence(commit func() error) error { return h.fence(commit, true, false) }

// FenceTrusted is Fence for a commit that never calls back into h (it runs no user code): a call
// that finds it running always waits for it.
func (h *Claim) FenceTrusted(commit func() error) error { return h.fence(commit, false, false) }

// FenceTrustedThenRelease is FenceTrusted, and then, unless h holds with flagHold, Release in the
// critical section that ends the fence.
func (h *Claim) FenceTrustedThenRelease(commit func() error) error {
	return h.fence(commit, false, true)
}

// fence runs commit between beginFence and endFence: userCommit says that commit runs user code,
// which may call back into h (see fencedByCaller); with releaseUnlessHold, a lock without
// flagHold is released as the fence ends.
func (h *Claim) fence(commit func() error, userCommit, releaseUnlessHold bool) error {
	stray, err := h.beginFence(userCommit)
	if err != nil {
		return err
	}
	defer h.endFence(stray, releaseUnlessHold)
	if userCommit {
		return runUserCommit(commit)
	}
	return commit()
}

// beginFence starts a fence once any fence running on h in another goroutine has ended. It
// returns ErrLeaseExpired when the lease has ended, ErrClosed when h was released and its tenant
// is closed, and ErrFenceInOwnFence when the caller is the commit of h's running fence; then no
// fence begins. userCommit says that the commit runs user code, which may call back into h (see
// fencedByCaller). stray reports that h no longer held its key, so that the fence is counted by
// the tenant, which Close waits for; endFence takes it back.
func (h *Claim) beginFence(userCommit bool) (stray bool, err error) {
	sh := h.lockShard()
	for h.flags()&flagFencing != 0 {
		if h.fencedByCaller() {
			sh.mu.Unlock()
			return false, ErrFenceInOwnFence
		}
		sh = h.awaitFenceEnd(sh)
	}
	if h.flags()&flagExpired != 0 || h.settle(sh) {
		sh.counts.fenced++
		sh.unlockAndRunDeferred()
		return false, ErrLeaseExpired
	}
	if h.flags()&flagHeld == 0 {
		// Released before the fence: Close no longer holds the key to wait on, so the fence
		// registers with the tenant instead.
		if !h.ten.strays.enter() {
			sh.mu.Unlock()
			return false, ErrClosed
		}
		stray = true
	}
	h.setFlags(flagFencing)
	if userCommit {
		h.coldPart().userFence = true
	}
	sh.mu.Unlock()
	return stray, nil
}

// endFence ends the fence beginFence began, passing the key on if the lease ended meanwhile, or
// else releasing a lock without flagHold if releaseUnlessHold. The release hook of a lease that
// ended inside the fence runs once the fence has ended, so a slow hook holds up no Release
// waiting for it.
func (h *Claim) endFence(stray, releaseUnlessHold bool) {
	sh := h.lockShard()
	h.clearFlags(flagFencing)
	if c := h.cold; c != nil {
		c.userFence = false
		if c.fenceEnd != nil {
			close(c.fenceEnd)
			c.fenceEnd = nil
		}
	}
	switch f := h.flags(); {
	case f&flagPassOnAfterFence != 0:
		h.clearFlags(flagPassOnAfterFence)
		sh.giveBack(h, 0)
		sh.deferHook(h)
	case releaseUnlessHold && !h.dead() && f&flagHold == 0:
		// No clock read: lapsed while the commit ran or not, the key goes back now and the hook
		// fires once, and from the deadline on both predicates read the lapse off the deadline.
		h.releaseLocked(sh)
	case f&flagExpired == 0:
		h.settle(sh) // a lease that lapsed while the commit ran, before any timer saw it
	}
	sh.unlockAndRunDeferred()
	if stray {
		h.ten.strays.leave()
	}
}
