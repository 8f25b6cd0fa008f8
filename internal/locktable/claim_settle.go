package locktable

import "time"

// Settling. A lease lapses at its deadline whether or not its timer has run: the timer may be
// late, or the claim may be off every heap. Whoever looks at a claim under the shard mutex and
// finds its deadline passed completes the expiry then and there (the key goes back, Done closes,
// the release hook is queued), so every observer agrees with the deadline. settle and settleAt
// report whether the lease has ended, by now or before; endIfLapsed reports whether it ended just
// now; settleNow takes the mutex to settle.

// settle settles h on a fresh reading of its clock, with the mutex of sh, its shard, held. It
// reports whether the lease has ended (lapsed or revoked).
func (h *Claim) settle(sh *shard) bool {
	if h.flags()&flagExpired != 0 {
		return true
	}
	return h.settleAt(sh, h.ten.clock.Mono())
}

// settleAt is settle (with the mutex of h's shard sh held) with the clock already read: now is a
// Mono of h's clock.
func (h *Claim) settleAt(sh *shard, now time.Duration) bool {
	if h.flags()&flagExpired != 0 {
		return true
	}
	if h.lapsedAt(now) {
		sh.expire(h)
		return true
	}
	return false
}

// endIfLapsed settles h, the holder of a key that c's request found with mono, a reading of c's
// clock, with the mutex of h's shard sh held. It reports whether it ended the lease just now.
func (h *Claim) endIfLapsed(sh *shard, c *Tenant, mono time.Duration) bool {
	// !lapsedFor spelled out: a contended Acquire comes here, and the call would not inline.
	if h.flags()&flagExpired != 0 || !h.lapsedAt(h.monoFor(c, mono)) {
		return false
	}
	sh.expire(h)
	return true
}

// lapsedFor reports whether h's lease, not yet ended, has lapsed at mono, a reading of c's clock.
func (h *Claim) lapsedFor(c *Tenant, mono time.Duration) bool {
	return h.flags()&flagExpired == 0 && h.lapsedAt(h.monoFor(c, mono))
}

// settleNow takes the shard mutex to complete an expiry found lazily, then runs its hook. It
// returns h's status as the mutex shows it: the lapse found without the mutex is checked again
// under it, since an Extend that held the mutex and found the lease live may have moved the
// deadline since. A released claim's lapse is read off its deadline, not settled.
func (h *Claim) settleNow() Status {
	sh := h.lockShard()
	ended := h.flags()&flagExpired != 0 || h.lapsed()
	if ended && h.flags()&flagReleased == 0 {
		sh.expire(h)
	}
	f := h.flags()
	if ended {
		f |= flagExpired
	}
	sh.unlockAndRunDeferred()
	return Status(f & flagBits)
}
