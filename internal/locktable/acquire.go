package locktable

import (
	"context"
	"errors"
	"time"
)

// Taking a key or a range: Acquire, the one way a request comes into the table, and the route of
// a key's request to the shard that takes it. In a table where no column family ever had a range,
// every key is taken in its own shard. Once one has, a key that a span of its column family's cover
// covers, or for which an owner's request must wait, is taken in the column family's home shard,
// among the ranges, and a range claim goes to its range space (docs/DESIGN.md §17.1). Bringing a
// key's entry into the home shard is rangeadopt.go's; taking a range is rangeacquire.go's.

// acquireReq is one Acquire: what its caller asked for, and the readings of the tenant's clock its
// attempt started at, from which the lease and the wait are measured. Acquire makes it only once the
// request leaves the uncontended path, so that the path spends no instruction on it; every
// later step, in whichever shard, reads it through one pointer.
type acquireReq struct {
	ctx  context.Context
	wall int64         // Unix nanoseconds
	mono time.Duration // the Mono reading Acquire returns
	// lease is the lease of a grant, timeout the bound of a wait (with ctxBounds, the caller gave
	// none of its own, and a ctx deadline replaces it: waitDeadline).
	lease, timeout time.Duration
	// wait queues a request for a busy key or range; without it, the request fails with ErrLocked.
	wait, ctxBounds bool
}

// deadline is the deadline of r's wait on the tenant's clock.
func (r *acquireReq) deadline() time.Duration {
	return waitDeadline(r.ctx, r.mono, r.timeout, r.ctxBounds)
}

// errRouteAgain tells Acquire that the key left the home shard while the request let its mutexes
// go: the request is routed again, from a fresh reading of the clock. It tells Upgrade that the
// key was brought into the home shard for the upgrade to wait there. It never leaves either.
var errRouteAgain = errors.New("locktable: route the request again")

// Acquire takes h's key for a lease of lease (at most MaxAskedLease, recorded as the lease asked
// for), or with wait queues for it until it is granted, timeout passes on the tenant's clock, ctx
// is done or the tenant closes. With ctxBounds (the caller gave no timeout of its own), a deadline
// of ctx replaces timeout (waitDeadline). It returns the Mono reading the attempt started at, from
// which the lease and the wait are measured. On failure it returns ErrClosed, ErrLocked (the key is
// busy and !wait), ErrTimeout, ctx's error or a *DeadlockError, and h holds nothing, waits for
// nothing and has given back its room in its tenant's bound (AskCounted); a grant that raced with
// the tenant's close is given back and fails with ErrClosed.
//
// A range claim takes its range in its column family's range space, which it has from
// prepareRange on (acquireRange). A key is taken in its own shard, unless its column family has a
// range space and either a span of the space's cover covers the key or an owner's request must
// wait for it: then it is taken in the space's home shard (takeInRangesLocked), and routed again
// if it left that shard while the request let its mutexes go. A key not in the table is granted
// here, so that the uncontended path makes no call of its own; in a table where no column family
// ever had a range, that path reads the map of range spaces twice and nothing else of ranges.
func (h *Claim) Acquire(ctx context.Context, lease, timeout time.Duration, wait, ctxBounds bool) (time.Duration, error) {
	h.setAskedLease(lease)
	c := h.ten
	if c.tab.spaces.Load() != nil && h.flags()&flagRange != 0 {
		return h.closedAfter(h.acquireRange(&acquireReq{ctx: ctx, lease: lease, timeout: timeout, wait: wait, ctxBounds: ctxBounds}))
	}
	hash := c.tab.hash(h.cf, h.key())
	sh := c.tab.shard(hash)
	for {
		h.hash = hash
		// Read before the mutex, which keeps the read out of the critical section every Lock and
		// Release of the shard queues behind. The lease is measured from this reading, so it can
		// only be shorter for the time spent waiting for the mutex, and timers are armed from a
		// fresh one.
		wall, mono := ReadClock(c.clock)
		sh.mu.Lock()
		if c.closed.Load() {
			sh.mu.Unlock()
			return h.closedAfter(0, ErrClosed)
		}
		var sp *rangeSpace
		if c.tab.spaces.Load() != nil { // some column family of the table has had a range request
			sp = c.tab.spaceOf(h.cf)
			if sp != nil && sh.routesHome(sp, h.key()) {
				if home := h.routeHomeLocked(sh, sp, false); home != nil {
					r := &acquireReq{ctx: ctx, wall: wall, mono: mono, lease: lease, timeout: timeout, wait: wait, ctxBounds: ctxBounds}
					start, err := home.takeInRangesLocked(sp, h, r)
					if err == errRouteAgain {
						continue
					}
					return h.closedAfter(start, err)
				}
			}
		}
		e := sh.lookup(h)
		if e != nil && e.holder != nil && sh.settleHolders(e, h, c, mono, wait) {
			e = sh.lookup(h) // settling may have emptied and removed the entry
		}
		if e != nil {
			r := &acquireReq{ctx: ctx, wall: wall, mono: mono, lease: lease, timeout: timeout, wait: wait, ctxBounds: ctxBounds}
			start, err := sh.takeBusyLocked(sp, e, h, r)
			if err == errRouteAgain {
				continue
			}
			return h.closedAfter(start, err)
		}
		e = sh.newEntry(hash)
		sh.grant(e, h, wall, mono, lease, false)
		sh.index.insert(e)
		if sp != nil {
			sh.noteEntry(e)
		}
		sh.unlockAndRunDeferred()
		return mono, nil
	}
}

// closedAfter is the result of Acquire given that of the request's path: a grant that raced with
// the tenant's close (ErrGrantedAfterClose) goes back, and the request fails with ErrClosed. A
// request that failed gives back its room in its tenant's bound, unless it did as it left a queue
// or gave its key back.
func (h *Claim) closedAfter(start time.Duration, err error) (time.Duration, error) {
	if err == ErrGrantedAfterClose {
		h.Release()
		err = ErrClosed
	}
	if err != nil && h.flags()&flagCounted != 0 {
		h.uncount() // h is the caller's alone: it holds nothing and waits for nothing
	}
	return start, err
}

// brings reports whether a span of sp's cover covers key, read without the home shard's mutex:
// its request must look in the home shard. hooks are its table's.
func (sp *rangeSpace) brings(key []byte, hooks *rangeHooks) bool {
	cv := sp.cover.Load()
	if f := hooks.coverRead; f != nil {
		f()
	}
	return cv.live.Covers(key) || cv.retiring.Covers(key)
}

// routesHome reports whether a request for key, of sp's column family, must look in the home
// shard, with the mutex of key's own shard sh held. It marks sh noted before it reads the cover:
// a range request publishes its span and then passes, without its mutex, a shard not noted
// (bringIn). Marked first, either the range request finds sh noted and waits for its mutex, so
// its visit comes after this request has made its entry, or this request reads the cover after
// the span was published. Marked only as the entry is made, after the read, a range request
// could publish between the two, pass sh, and miss the entry: a key held inside a range granted.
func (sh *shard) routesHome(sp *rangeSpace, key []byte) bool {
	if !sh.order.noted.Load() {
		sh.order.noted.Store(true)
	}
	return sp.brings(key, &sh.tab.ranges.hooks)
}

// takeBusyLocked ends Acquire for h's key when it is in sh's table (e), entered with sh's mutex
// held and returning with every mutex released: granted at once if e admits h, else ErrLocked or
// the wait. With sp, the range space of h's column family, an owner's request that must wait,
// waits in the home shard, key and all: an owner's request there passes a request that waits for
// it (rangepass.go), also through the waits of other owners, and those it must see.
func (sh *shard) takeBusyLocked(sp *rangeSpace, e *keyEntry, h *Claim, r *acquireReq) (time.Duration, error) {
	switch {
	case e.admits(h, h.ten, r.mono):
		sh.grantKey(e, h, r.wall, r.mono, r.lease, e.head != nil)
	case !r.wait:
		sh.unlockAndRunDeferred()
		return 0, ErrLocked
	case sp != nil && h.owner != nil:
		return h.routeHomeLocked(sh, sp, true).takeInRangesLocked(sp, h, r) // owned: always the home shard
	default:
		return r.mono, sh.wait(r.ctx, e, h, r.lease, r.deadline(), r.mono)
	}
	sh.unlockAndRunDeferred()
	return r.mono, nil
}

// settleHolders settles the lapsed holders of e that a request for h, made at mono on c's clock,
// must get past: an exclusive holder, or for an exclusive request the sharers, until one is live.
// One that queues (wait) while a sharer has no timer (e.unwatched) settles every lapsed sharer: it
// is about to watch each of them anyway (watchHolders), and a lapsed share left in place until its
// timer runs would still count as held to the queue, and so to the requests that may pass those
// that wait for it (rangepass.go). It reports whether it ended a lease just now (the entry may
// have left the table).
func (sh *shard) settleHolders(e *keyEntry, h *Claim, c *Tenant, mono time.Duration, wait bool) bool {
	if e.shares == 0 {
		return e.holder.endIfLapsed(sh, c, mono)
	}
	if h.flags()&flagShared != 0 {
		return false // a shared request joins sharers whatever their leases
	}
	if wait && e.unwatched {
		return sh.settleOtherSharers(e, h, c, mono) // h is none of them: every lapsed one
	}
	settled := false
	for e.shares > 0 && e.lastSharer().endIfLapsed(sh, c, mono) {
		settled = true
	}
	return settled
}

// routeHomeLocked picks the shard that takes h's key when a span of sp's cover covers it, or
// with owned when an owner's request must wait for it: entered with the mutex of sh, the key's own
// shard (h.hash places it there), held, it returns with the mutex of the shard it picks held, and
// only that one: sp's home shard, which it returns, or sh, for which it returns nil. With both
// mutexes held it reads the cover again: a live span (or owned) brings the key's entry into the
// home shard now if a range request has not yet (rangeadopt.go), and picks the home shard; a
// retiring one only means the entry may still be there, and when it is not, sh takes the key
// after all.
func (h *Claim) routeHomeLocked(sh *shard, sp *rangeSpace, owned bool) *shard {
	home := sp.home
	sh.mu.Unlock()
	lockPair(sh, home)
	hash := h.hash
	at := routed(hash, sp.homeIdx)
	for {
		live := sp.cover.Load().live.Covers(h.key()) // the cover changes only under home's mutex
		if !live && !owned {
			if home.index.find(at, h.cf, h.key()) == nil {
				home.unlockAndRunDeferred()
				return nil
			}
			break
		}
		e := sh.index.find(hash, h.cf, h.key())
		if e == nil {
			break // not in sh: nothing to bring in
		}
		if size := home.index.grownFor(1); size != 0 {
			growIndex(sh, home, 1, size) // not under sh's mutex
			lockPair(sh, home)
			continue
		}
		homeSlots := len(home.index.slots)
		if ne := sh.moveEntry(home, e, sp); !live {
			sp.orphanBrought(ne)
		}
		sp.broughtSteps.noteRehashed(home, homeSlots)
		break
	}
	sh.unlockAndRunDeferred()
	h.hash = at
	return home
}

// takeInRangesLocked takes h's key in sh, the home shard of sp, entered with sh's mutex held and
// returning with every mutex released: h's key waits for the ranges over it as well as for its
// holders (rangegrant.go). It returns errRouteAgain when the key has left the home shard.
func (sh *shard) takeInRangesLocked(sp *rangeSpace, h *Claim, r *acquireReq) (time.Duration, error) {
	c, mono := h.ten, r.mono
	if e := sh.lookup(h); e != nil && e.holder != nil {
		sh.settleHolders(e, h, c, mono, r.wait)
	}
	blocked := sp.keyBlocked(sh, h, newest, true, c, mono)
	e := sh.lookup(h) // settling lapsed holders or ranges may have changed or removed the entry
	if e == nil && !sp.cover.Load().live.Covers(h.key()) {
		// The key left the home shard, and no live span brings it back: its own shard takes it,
		// which needs that shard's mutex first.
		sh.unlockAndRunDeferred()
		return 0, errRouteAgain
	}
	admitted, before := true, (*waiter)(nil)
	if e != nil {
		admitted, before = sp.placeNewcomer(e, h, c, mono)
	}
	switch {
	case (blocked || !admitted) && !r.wait:
		sh.unlockAndRunDeferred()
		return 0, ErrLocked
	case blocked || !admitted:
		if e == nil {
			e = sh.newRangedEntry(sp, h)
		}
		return mono, sh.waitBefore(r.ctx, e, h, before, r.lease, r.deadline(), mono)
	case e != nil:
		sh.grantKey(e, h, r.wall, mono, r.lease, e.head != nil || e.rangeWaitsOver())
	default:
		e = sh.newRangedEntry(sp, h)
		// A range request it passed (rangepass.go) waits for it, and must see its lease end.
		sh.grantKey(e, h, r.wall, mono, r.lease, e.rangeWaitsOver())
	}
	sh.unlockAndRunDeferred()
	return mono, nil
}
