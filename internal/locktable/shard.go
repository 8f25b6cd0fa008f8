package locktable

import (
	"context"
	"sync"
	"time"
	"unsafe"
)

// shard is one mutex's worth of the table. Every field of every entry, waiter and scheduler of
// the shard, and the fields of a Claim whose comment says so (a claim of one of its keys), are
// guarded by mu.
type shard struct {
	shardState
	// Keeps the state of neighbouring shards, which goroutines on different keys write at once,
	// out of each other's cache lines, and keeps every shard on a falseSharingRange boundary.
	_ [shardPad]byte
}

// shardPad rounds a shard up to a multiple of falseSharingRange with at least falseSharingRange
// to spare.
const shardPad = (unsafe.Sizeof(shardState{})+2*falseSharingRange-1)/falseSharingRange*falseSharingRange -
	unsafe.Sizeof(shardState{})

// shardState is laid out for an uncontended Lock and Release, which touch four of its cache
// lines: the first (the mutex, the spare entries, the index's header), the index's own slots, the
// first scheduler's heap and timer, and one of the own entries (a test checks the layout).
type shardState struct {
	mu sync.Mutex
	// Entries no key uses, kept for reuse: the shard's own, a bit each in ownSpare, and a few
	// allocated ones in spare[:nSpare], which are let go once the shard is idle.
	ownSpare uint8
	nSpare   int
	_        [8]byte // keeps the index's own slots starting the second cache line
	index    entryTable
	// The schedulers of the table's clock slots: slot 0's inside the shard, the others allocated.
	firstSched scheduler
	// Counted by every Lock and Release, in the cache line of the first scheduler's clock, which
	// both read anyway.
	acquired uint64
	held     int
	// tab is the table the shard is part of: a grant mints AcquiredAt from its database's
	// timestamps.
	tab        *Table
	moreScheds []*scheduler // slot 1 and up; nil where the slot is free
	// ownEntries are the entries a shard uses first: a shard with a key or two at a time keeps
	// them in its own cache lines rather than in small objects that neighbour other shards'.
	ownEntries [2]keyEntry
	deferred   []deferredCall // release hooks and debug records to run once mu is released
	counts     shardCounts    // what only contended and failing calls count
	// spaces are the range spaces whose home this shard is (rangespace.go).
	spaces map[uint32]*rangeSpace
	// repassDue are the range spaces of this home shard where a lock or a request of an owner
	// ended while others waited: their queues are gone over again before mu is released
	// (repassDueSpaces).
	repassDue []*rangeSpace
	// order is a key shard's ordered view of its entries of column families with a range space
	// (keyorder.go).
	order keyOrder
	spare [maxSpare]*keyEntry
}

// init makes the shard part of t and its own entries spare, before the table is used.
func (sh *shard) init(t *Table) {
	sh.tab = t
	sh.ownSpare = 1<<len(sh.ownEntries) - 1
}

func (sh *shard) lookup(h *Claim) *keyEntry { return sh.index.find(h.hash, h.cf, h.key()) }

// grant makes h a holder of e and starts its lease at the given readings of h's clock (wall in
// Unix nanoseconds). The deadline goes on a timer only if watch, that is when a request is
// queued behind it (see watch); a sharer's deadline that is not notes that e has one unwatched.
func (sh *shard) grant(e *keyEntry, h *Claim, wall int64, mono, lease time.Duration, watch bool) {
	f := h.flags()
	if f&flagShared == 0 {
		e.holder = h
	} else {
		f = e.addSharer(h, f)
		e.unwatched = e.unwatched || !watch
	}
	h.e = e
	h.acquiredAt = sh.tab.stamps.Mint(wall)
	h.expiresAt = wall + int64(lease)
	h.deadline.Store(int64(MonoAfter(mono, lease)))
	h.state.Store(f | flagHeld)
	sh.acquired++
	sh.held++
	if watch {
		sh.schedule(h)
	}
}

// grantKey is grant that also marks a holder of a key in a home shard (flagInHomeShard), so that
// giving the key back serves the ranges it may hold up. Every grant of a key goes through it but
// that of a key not yet in the table, which its caller makes in the key's own shard, never a home
// shard, and grants with grant alone.
func (sh *shard) grantKey(e *keyEntry, h *Claim, wall int64, mono, lease time.Duration, watch bool) {
	sh.grant(e, h, wall, mono, lease, watch)
	if e.space != nil {
		h.setFlags(flagInHomeShard)
	}
}

// watch arms h's lease deadline on its clock's timer, if it is not armed yet, once someone can
// observe the lease ending: a waiter queues for its key, Done is called, or a release hook is set.
// Until then nothing can tell a lapse settled at the deadline from one settled when the handle or
// its key is next looked at (docs/DESIGN.md §7), so an uncontended lock costs no scheduling.
func (sh *shard) watch(h *Claim) {
	if h.heapIdx < 0 && h.flags()&flagExpired == 0 {
		sh.schedule(h)
	}
}

// watchHolders watches every holder of e, for a request that queues: each holder's lapse gives
// back its share of the key, and the last one frees it.
func (sh *shard) watchHolders(e *keyEntry) {
	switch {
	case e.shares == 0:
		if e.holder != nil {
			sh.watch(e.holder)
		}
	case e.unwatched:
		e.unwatched = false
		sh.watch(e.holder)
		for _, h := range e.others() {
			sh.watch(h)
		}
	}
}

// Unbounded is the timeout of a wait that only its ctx bounds: no clock reaches it (about 146
// years), and its sum with any Mono reading still fits a time.Duration.
const Unbounded = time.Duration(1 << 62)

// waitDeadline is the deadline, on the tenant's clock, of a wait for a busy key that starts at
// mono: timeout after mono, or with ctxBounds (the caller gave no timeout of its own) and a ctx
// deadline, Unbounded after it, since that deadline, on the real clock, ends the wait through
// ctx, with ctx's error. Every wait's deadline, and every bound the API keeps on its clock
// (ClockDeadline), is worked out here.
func waitDeadline(ctx context.Context, mono, timeout time.Duration, ctxBounds bool) time.Duration {
	if ctxBounds {
		if _, ok := ctx.Deadline(); ok {
			return MonoAfter(mono, Unbounded)
		}
	}
	return MonoAfter(mono, timeout)
}

// ClockDeadline is the deadline on the tenant's clock, from mono, of a bound the API keeps on
// that clock rather than leaving it to ctx, because it spans several waits (LockAll's Timeout)
// or goes to a coordinator (a round's Timeout): waitDeadline, except that a ctx deadline is
// carried over onto the tenant's clock as the time left until it, measured on the real clock (ctx
// deadlines are readings of it, whatever the tenant's clock). It returns context.DeadlineExceeded
// when none is left.
func ClockDeadline(ctx context.Context, mono, timeout time.Duration, ctxBounds bool) (time.Duration, error) {
	if ctxBounds {
		if d, ok := ctx.Deadline(); ok {
			left := time.Until(d)
			if left <= 0 {
				return 0, context.DeadlineExceeded
			}
			timeout = left
		}
	}
	return waitDeadline(ctx, mono, timeout, false), nil
}
