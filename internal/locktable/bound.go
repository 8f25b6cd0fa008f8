package locktable

import (
	"sync/atomic"
	"time"
)

// A tenant's bound (docs/DESIGN.md §18): at most n claims of the tenant in the table, holding a
// key or range or queued for one. The API reserves a claim's room before it prepares the claim
// (Reserve), so a request the bound refuses never reaches the table, and prepares it with
// AskCounted, which marks it flagCounted. The claim gives its room back once, as it clears the
// flag: under its shard mutex when it gives its key back (release, lapse, revocation, Close:
// giveBackCounted) or its queued request leaves ungranted (timeout, ctx, deadlock, Close: drop,
// dropRange), or in Acquire when it failed before it queued (closedAfter). A tenant with no
// bound marks no claim, and its requests pass none of this but a test of the flag in giveBack.

// flagCounted marks a claim that has a room in its tenant's bound, until it gives it back.
const flagCounted = flagInHomeShard << 1

// The flag must lie below a sharer's place in the state word: this does not compile otherwise.
const _ = uint(flagBits - flagCounted)

// bound is a tenant's count of its counted claims and its limit. It is padded to keep the count,
// which every counted Lock and Release of the tenant writes, off the cache lines of anything else.
type bound struct {
	used atomic.Int64
	max  int64
	_    [falseSharingRange - 16]byte
}

// take adds k to the count if the count stays within the limit, and reports whether it did.
func (b *bound) take(k int64) bool {
	for {
		n := b.used.Load()
		if n > b.max-k {
			return false
		}
		if b.used.CompareAndSwap(n, n+k) {
			return true
		}
	}
}

// SetBound limits the claims of t in the table, held or queued, to n (n >= 1). It is called
// before t's first request.
func (t *Tenant) SetBound(n int) { t.bound = &bound{max: int64(n)} }

// Bounded reports whether t has a bound: its requests must Reserve their room first.
func (t *Tenant) Bounded() bool { return t.bound != nil }

// Bound returns t's limit, 0 for none.
func (t *Tenant) Bound() int {
	if t.bound == nil {
		return 0
	}
	return int(t.bound.max)
}

// Reserve reserves room in t's bound for k more claims, each of which a request prepared with
// AskCounted then takes. A bound found full is first rid of the leases of t that lapsed unseen:
// they are settled, which gives their keys and rooms back, and the reservation is tried again.
// It reports false, reserving nothing, when k claims do not fit. When they fit it costs one
// atomic add, and it is small enough to inline.
func (t *Tenant) Reserve(k int) bool {
	return t.bound.used.Add(int64(k)) <= t.bound.max || t.reserveFull(k)
}

// reserveFull is Reserve once its add took the count past the limit: the add is taken back, and
// the reservation is tried again without overshooting, then once more after the sweep of lapsed
// leases. A Reserve that overshot at the same moment may briefly count against this one.
func (t *Tenant) reserveFull(k int) bool {
	b := t.bound
	b.used.Add(-int64(k))
	if b.take(int64(k)) {
		return true
	}
	t.tab.settleLapsed(t)
	return b.take(int64(k))
}

// Unreserve gives back the rooms of k claims Reserve reserved that no request took.
func (t *Tenant) Unreserve(k int) {
	if k > 0 {
		t.bound.used.Add(-int64(k))
	}
}

// uncount gives back h's room in its tenant's bound, with the shard mutex held or, once Acquire
// failed, with h the caller's alone; h is counted (flagCounted).
func (h *Claim) uncount() {
	h.clearFlags(flagCounted)
	h.ten.bound.used.Add(-1)
}

// giveBackCounted is giveBack of a counted claim, other than the exclusive holder of a key in its
// own shard, which giveBack handles itself: the claim's room in its tenant's bound goes back with
// its key.
func (sh *shard) giveBackCounted(h *Claim, set uint32) {
	h.clearFlags(flagCounted)
	sh.giveBack(h, set)
	h.ten.bound.used.Add(-1)
}

// settleLapsed settles the lapsed leases of c's counted claims in every shard. A lease no one
// watches lapses unseen until its key is next looked at (docs/DESIGN.md §7), and a full bound must
// find the room such a lease held. A claim inside a fence is left to the fence, which gives its
// key back as it ends.
func (t *Table) settleLapsed(c *Tenant) {
	var lapsed, holders []*Claim
	var mono time.Duration // read before each shard's mutex
	mine := func(h *Claim) bool {
		return h.ten == c && h.flags()&(flagCounted|flagFencing) == flagCounted && h.lapsedFor(c, mono)
	}
	for i := range t.shards {
		sh := &t.shards[i]
		mono = c.clock.Mono()
		sh.mu.Lock()
		lapsed = lapsed[:0]
		// Collected first: settling a lease can pass its key on or take its entry out.
		sh.index.all(func(e *keyEntry) {
			holders = e.appendHolders(holders[:0])
			for _, h := range holders {
				if mine(h) {
					lapsed = append(lapsed, h)
				}
			}
		})
		for _, sp := range sh.spaces {
			sp.ranges.meeting(nil, nil, func(y *Claim) bool {
				if heldRange(y) && mine(y) {
					lapsed = append(lapsed, y)
				}
				return true
			})
		}
		for _, h := range lapsed {
			h.endIfLapsed(sh, c, mono)
		}
		sh.unlockAndRunDeferred()
	}
}
