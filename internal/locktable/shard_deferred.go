package locktable

// Release hooks and debug records are collected under the shard mutex and run once it is
// released: never while a table lock is held.

// deferredCall is a release hook (fn), or a debug record (note), to run once the shard mutex is
// released.
type deferredCall struct {
	h    *Hold
	fn   func() error
	note func()
}

// deferHook moves h's release hook, if any, to the list run after mu is released.
func (sh *shard) deferHook(h *Hold) {
	if h.cold == nil || h.cold.Hook == nil {
		return
	}
	sh.deferred = append(sh.deferred, deferredCall{h: h, fn: h.cold.Hook})
	h.cold.Hook = nil
}

// drainDeferred hands the calls deferred under mu to the caller, to run once mu is released.
func (sh *shard) drainDeferred() []deferredCall {
	hs := sh.deferred
	if hs != nil { // most critical sections queue no hook: no store, no write barrier
		sh.deferred = nil
	}
	return hs
}

func runDeferred(hs []deferredCall) {
	for _, p := range hs {
		if p.note != nil {
			p.note()
			continue
		}
		p.h.ten.RunHook(p.fn)
	}
}

// unlockAndRunDeferred releases mu and then runs the calls deferred while it was held.
func (sh *shard) unlockAndRunDeferred() {
	hs := sh.drainDeferred()
	sh.mu.Unlock()
	runDeferred(hs)
}
