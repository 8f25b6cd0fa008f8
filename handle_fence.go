package recordlock

// Fencing: a commit runs only while the lease is live, and the key stays with the handle until
// the commit returns (docs/DESIGN.md §5).

// lockForChange takes the shard mutex for Release or RevokeLease, first waiting for a Fence
// running in another goroutine to return, whatever the handle's state: a lease that lapsed inside
// Fence still has its commit in flight (docs/DESIGN.md §5). It reports whether it had to wait.
func (h *Handle) lockForChange(sh *shard) (waited bool) {
	for {
		sh.mu.Lock()
		if h.flags()&flagFencing == 0 {
			return waited
		}
		sh.mu.Unlock()
		h.fenceMu.Lock()
		//lint:ignore SA2001 the empty critical section is the point: it waits for Fence to return
		h.fenceMu.Unlock()
		waited = true
	}
}

// Fence runs commit only while the lease is live and keeps the key from passing to another
// holder until commit returns. It returns ErrLeaseExpired without calling commit when
// IsLeaseExpired is true, and otherwise commit's error. If the lease ends while commit runs, Done
// closes at once and the key passes on when commit returns. commit may call the handle's
// accessors and predicates; it must not call Release, RevokeLease or Fence on the same handle.
// Fence after Release still runs while the lease lasts, but then a successor may hold the key;
// once the Locker is closed it returns ErrClosed without calling commit.
func (h *Handle) Fence(commit func() error) error { return h.fence(commit, false) }

// fenceThenRelease is Fence followed, unless the lock is held (Hold), by Release in the critical
// section that ends the fence: one mutex round trip and two clock reads fewer than the two calls,
// for Txn.Commit, whose locks without Hold end with it.
func (h *Handle) fenceThenRelease(commit func() error) error { return h.fence(commit, true) }

// fence is Fence; with releaseUnlessHold it is fenceThenRelease.
func (h *Handle) fence(commit func() error, releaseUnlessHold bool) error {
	sh := h.shard()
	h.fenceMu.Lock()
	sh.mu.Lock()
	if h.flags()&flagExpired != 0 || h.settle(sh) {
		sh.counts.fenced++
		hooks := sh.drainHooks()
		sh.mu.Unlock()
		h.fenceMu.Unlock()
		runHooks(hooks)
		return ErrLeaseExpired
	}
	if h.flags()&flagHeld == 0 {
		// Released before the fence: Close no longer holds the key to wait on, so the fence
		// registers with the Locker instead.
		if !h.l.strays.enter() {
			sh.mu.Unlock()
			h.fenceMu.Unlock()
			return ErrClosed
		}
		defer h.l.strays.leave()
	}
	h.setFlags(flagFencing)
	sh.mu.Unlock()
	// The release hook of a lease that ended inside Fence runs after fenceMu is released, so a
	// slow hook does not hold up Release or RevokeLease callers waiting for the commit.
	defer func() {
		hooks := h.endFence(sh, releaseUnlessHold)
		h.fenceMu.Unlock()
		runHooks(hooks)
	}()
	return commit()
}

// endFence leaves Fence, passing the key on if the lease ended while commit ran, or else
// releasing a lock without Hold if asked to. It returns the release hook to run once the caller
// has let go of fenceMu.
func (h *Handle) endFence(sh *shard, releaseUnlessHold bool) []pendingHook {
	sh.mu.Lock()
	h.clearFlags(flagFencing)
	switch f := h.flags(); {
	case f&flagPassOnAfterFence != 0:
		h.clearFlags(flagPassOnAfterFence)
		sh.giveBack(h, 0)
		sh.queueHook(h)
	case releaseUnlessHold && !h.dead() && f&flagHold == 0:
		// No clock read: lapsed while commit ran or not, the key goes back now and the hook
		// fires once, and from the deadline on both predicates read the lapse off the deadline.
		h.releaseLocked(sh)
	case f&flagExpired == 0:
		h.settle(sh) // a lease that lapsed while commit ran, before any timer saw it
	}
	hooks := sh.drainHooks()
	sh.mu.Unlock()
	return hooks
}
