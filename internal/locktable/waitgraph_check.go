//go:build invariants

package locktable

// checkLocked checks what g keeps, with g.mu held, as it is about to be released: each owner
// waits with a claim of its own, and the count that give-backs read without g.mu is right. It
// takes each waiting claim's shard mutex to read its owner, as a search does.
func (g *waitGraph) checkLocked() {
	if int(g.count.Load()) != len(g.waiting) {
		violated("the wait-for graph counts its waiting owners", "count %d, %d waiting", g.count.Load(), len(g.waiting))
	}
	for k, h := range g.waiting {
		sh := h.lockShard()
		ok := keyOf(h.owner) == k
		sh.mu.Unlock()
		if !ok {
			violated("the wait-for graph's waiting owners wait with their own claims", "a claim of another owner")
		}
	}
}
