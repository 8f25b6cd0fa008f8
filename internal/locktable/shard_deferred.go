package locktable

// Release hooks and debug records are collected under the shard mutex and run once it is
// released: never while a table lock is held.

// deferredCall is a release hook (fn), a debug record (note) or a holder's waited-on call (tell),
// to run once the shard mutex is released.
type deferredCall struct {
	h    *Claim
	fn   func() error
	note func()
	// tell, when set, is a tenant's waited-on function, called with owner; with regraph set
	// instead, owner's wait is checked for a cycle again (waitGraph.recheckOwner).
	tell    func(Owner)
	regraph *waitGraph
	owner   Owner
}

// deferHook moves h's release hook, if any, to the list run after mu is released.
func (sh *shard) deferHook(h *Claim) {
	if h.cold == nil || h.cold.hook == nil {
		return
	}
	sh.deferred = append(sh.deferred, deferredCall{h: h, fn: h.cold.hook})
	h.cold.hook = nil
}

// drainDeferred hands the calls deferred under mu to the caller, to run once mu is released. It
// is the last step before mu is released after a change (unlockAndRunDeferred, and the
// deadlock's path in waitGraph.enter), where a build with the tag invariants checks the shard's
// invariants (shard_check.go). The few paths that release mu with a bare Unlock change what the
// invariants allow as it is (a claim's or a request's own fields, a count, an empty scheduler or
// range space), or publish a range request's span before it brings its keys in (acquireRange),
// which they allow for too; the next release through here checks what they left.
func (sh *shard) drainDeferred() []deferredCall {
	hs := sh.deferred
	if hs != nil { // most critical sections queue no hook: no store, no write barrier
		hs = sh.takeDeferred()
	}
	sh.checkLocked()
	return hs
}

// takeDeferred is drainDeferred where a call was deferred. The range spaces marked for a repass
// are gone over first, under mu (repassDueSpaces): marking one defers a check of the wait-for
// graph, so a critical section that deferred nothing marked none.
func (sh *shard) takeDeferred() []deferredCall {
	if sh.repassDue != nil {
		sh.repassDueSpaces()
	}
	hs := sh.deferred
	sh.deferred = nil
	return hs
}

func runDeferred(hs []deferredCall) {
	for _, p := range hs {
		if p.tell != nil {
			p.tell(p.owner)
			continue
		}
		if p.regraph != nil {
			p.regraph.recheckOwner(p.owner)
			continue
		}
		if p.note != nil {
			p.note()
			continue
		}
		p.h.ten.RunHook(p.fn)
	}
}

// unlockAndRunDeferred, entered with sh's mutex held, releases it and then runs the calls
// deferred while it was held. Most
// critical sections defer none, and then it makes no call.
func (sh *shard) unlockAndRunDeferred() {
	hs := sh.drainDeferred()
	sh.mu.Unlock()
	if len(hs) > 0 {
		runDeferred(hs)
	}
}

// tellHolders queues, to run once mu is released, a call of the waited-on function of each
// owner's claim on e's key whose tenant has one (Tenant.SetOnWaitedOn): a request just queued.
func (sh *shard) tellHolders(e *keyEntry) {
	if e.holder != nil {
		sh.tellHolder(e.holder)
	}
	for _, x := range e.others() {
		sh.tellHolder(x)
	}
}

// tellHolder queues the call of tellHolders for x.
func (sh *shard) tellHolder(x *Claim) {
	if f := x.ten.onWaitedOn; f != nil && x.owner != nil {
		sh.deferred = append(sh.deferred, deferredCall{tell: f, owner: x.owner})
	}
}

// heldTell is the call tellHolders queues for a key's one holder, kept by its caller instead.
type heldTell struct {
	tell  func(Owner)
	owner Owner
}

// tellHoldersAfter is tellHolders for a caller that releases mu with unlockAndRunDeferred
// before it queues anything else, and then runs what it returns: the call for a key held by one
// holder, the usual case, which then needs no deferred list of its own (allocated for every
// wait otherwise). It runs after the calls deferred before it, as it would from the list.
func (sh *shard) tellHoldersAfter(e *keyEntry) heldTell {
	if len(e.others()) > 0 {
		sh.tellHolders(e)
		return heldTell{}
	}
	if x := e.holder; x != nil && x.ten.onWaitedOn != nil && x.owner != nil {
		return heldTell{tell: x.ten.onWaitedOn, owner: x.owner}
	}
	return heldTell{}
}

// run makes the call, if any, once mu is released.
func (t heldTell) run() {
	if t.tell != nil {
		t.tell(t.owner)
	}
}
