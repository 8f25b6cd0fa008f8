package locktable

// Release hooks and debug records are collected under the shard mutex and run once it is
// released: never while a table lock is held.

// pendingHook is a release hook, or a debug record (note), to run once the shard mutex is
// released.
type pendingHook struct {
	h    *Hold
	fn   func() error
	note func()
}

// deferHook moves h's release hook, if any, to the list run after mu is released.
func (sh *shard) deferHook(h *Hold) {
	if h.cold == nil || h.cold.Hook == nil {
		return
	}
	sh.hooks = append(sh.hooks, pendingHook{h: h, fn: h.cold.Hook})
	h.cold.Hook = nil
}

// drainHooks hands the release hooks collected under mu to the caller, to run once mu is released.
func (sh *shard) drainHooks() []pendingHook {
	hs := sh.hooks
	if hs != nil { // most critical sections queue no hook: no store, no write barrier
		sh.hooks = nil
	}
	return hs
}

func runHooks(hs []pendingHook) {
	for _, p := range hs {
		if p.note != nil {
			p.note()
			continue
		}
		p.h.ten.RunHook(p.fn)
	}
}

// unlockAndRunDeferred releases mu and then runs the hooks collected while it was held.
func (sh *shard) unlockAndRunDeferred() {
	hs := sh.drainHooks()
	sh.mu.Unlock()
	runHooks(hs)
}
