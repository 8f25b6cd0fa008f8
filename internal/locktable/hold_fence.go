package locktable

// Fencing: a commit runs only while the lease is live, and the key stays with the hold until the
// commit returns (docs/DESIGN.md §5). The API runs the commit between BeginFence and EndFence.

// lockForChange takes the shard mutex for Release or Revoke, first waiting for a fence running
// in another goroutine to end, whatever the hold's state: a lease that lapsed inside a fence still
// has its commit in flight. It reports whether it had to wait.
func (h *Hold) lockForChange() (sh *shard, waited bool) {
	sh = h.lockShard()
	for h.flags()&FlagFencing != 0 {
		sh = h.awaitFenceEnd(sh)
		waited = true
	}
	return sh, waited
}

// awaitFenceEnd releases the shard mutex until the running fence ends, then takes the mutex of
// h's shard again and returns that shard.
func (h *Hold) awaitFenceEnd(sh *shard) *shard {
	c := h.Cold()
	if c.fenceEnd == nil {
		c.fenceEnd = make(chan struct{})
	}
	end := c.fenceEnd
	sh.mu.Unlock()
	<-end
	return h.lockShard()
}

// BeginFence starts a fence once any fence running on h in another goroutine has ended. It
// returns ErrLeaseExpired when the lease has ended, and ErrClosed when h was released and its
// tenant is closed; then no fence begins. stray reports that h no longer held its key, so that
// the fence is counted by the tenant, which Close waits for; EndFence takes it back.
func (h *Hold) BeginFence() (stray bool, err error) {
	sh := h.lockShard()
	for h.flags()&FlagFencing != 0 {
		sh = h.awaitFenceEnd(sh)
	}
	if h.flags()&FlagExpired != 0 || h.settle(sh) {
		sh.counts.fenced++
		sh.unlockAndRunDeferred()
		return false, ErrLeaseExpired
	}
	if h.flags()&FlagHeld == 0 {
		// Released before the fence: Close no longer holds the key to wait on, so the fence
		// registers with the tenant instead.
		if !h.ten.strays.enter() {
			sh.mu.Unlock()
			return false, ErrClosed
		}
		stray = true
	}
	h.SetFlags(FlagFencing)
	sh.mu.Unlock()
	return stray, nil
}

// EndFence ends the fence BeginFence began, passing the key on if the lease ended meanwhile, or
// else releasing a lock without FlagHold if releaseUnlessHold. The release hook of a lease that
// ended inside the fence runs once the fence has ended, so a slow hook holds up no Release
// waiting for it.
func (h *Hold) EndFence(stray, releaseUnlessHold bool) {
	sh := h.lockShard()
	h.ClearFlags(FlagFencing)
	if c := h.cold; c != nil && c.fenceEnd != nil {
		close(c.fenceEnd)
		c.fenceEnd = nil
	}
	switch f := h.flags(); {
	case f&FlagPassOnAfterFence != 0:
		h.ClearFlags(FlagPassOnAfterFence)
		sh.giveBack(h, 0)
		sh.deferHook(h)
	case releaseUnlessHold && !h.Dead() && f&FlagHold == 0:
		// No clock read: lapsed while the commit ran or not, the key goes back now and the hook
		// fires once, and from the deadline on both predicates read the lapse off the deadline.
		h.releaseLocked(sh)
	case f&FlagExpired == 0:
		h.settle(sh) // a lease that lapsed while the commit ran, before any timer saw it
	}
	sh.unlockAndRunDeferred()
	if stray {
		h.ten.strays.leave()
	}
}
