package locktable

import (
	"context"
	"time"
)

// A request's wait for a busy key or range: it queues, arms its timeout, enters the wait-for
// graph and sleeps until its outcome is decided under the shard mutex (waitqueue.go).

// wait, entered with sh's mutex held and returning with it released, queues h for e's key and
// blocks until it is granted, the timeout passes at deadline, ctx is done or the Locker closes
// (ErrGrantedAfterClose when a grant raced with that). A Txn's wait is first checked for a
// deadlock.
func (sh *shard) wait(ctx context.Context, e *keyEntry, h *Claim, lease, deadline, mono time.Duration) error {
	return sh.waitBefore(ctx, e, h, nil, lease, deadline, mono)
}

// waitBefore is wait (entered with sh's mutex held, returning with it released) with h queued
// ahead of before, a request queued for e's key that h passes
// (rangepass.go), or at the tail when before is nil.
func (sh *shard) waitBefore(ctx context.Context, e *keyEntry, h *Claim, before *waiter, lease, deadline, mono time.Duration) error {
	w := &waiter{h: h, since: mono, lease: lease, wake: make(chan struct{}, 1), shared: h.flags()&flagShared != 0}
	if e.space != nil {
		w.seq = e.space.nextSeq()
	}
	if before == nil {
		sh.enqueue(e, w)
	} else {
		sh.enqueueAfter(e, w, before.prev)
	}
	return sh.sleep(ctx, e, w, deadline)
}

// sleep, entered with sh's mutex held and returning with it released, arms the timeout of w,
// queued for e's key (for a range request, e is nil), at deadline and blocks until w is granted,
// the timeout passes, ctx is done, the Locker closes or, for an upgrade, its share ends. A Txn's
// wait is first checked for a deadlock. The record may move to another shard meanwhile
// (rangeadopt.go), so the shard and entry are looked up again whenever the mutex is taken again.
func (sh *shard) sleep(ctx context.Context, e *keyEntry, w *waiter, deadline time.Duration) error {
	h := w.h
	c := h.ten
	h.w, h.e = w, e
	if h.owner != nil {
		sh.list(e, w)
		if sp := w.listed; sp != nil && len(sp.waiting) > 1 {
			sh.serveWaitingOwners(sp, w)
		}
	}
	h.deadline.Store(int64(deadline)) // the wait's timeout until the key is granted
	sh.schedule(h)
	var tell heldTell
	if e != nil {
		sh.watchHolders(e) // the key must pass on at the holders' deadlines
		tell = sh.tellHoldersAfter(e)
	} else {
		sh.watchSpan(w.space, h) // and tells their holders, as tellHolders does
	}
	if h.owner == nil {
		sh.countWaiting(w)
	}
	sh.unlockAndRunDeferred()
	tell.run()
	if h.owner != nil {
		if err := sh.tab.graph.enter(h); err != nil {
			return err
		}
		defer sh.tab.graph.leave(h)
		sh = h.lockShard()
		if h.w == w {
			sh.countWaiting(w)
		}
		sh.mu.Unlock()
	}
	for {
		select {
		case <-w.wake:
		case <-ctx.Done():
		}
		sh = h.lockShard()
		switch w.state {
		case waitGranted:
			sh.unlockAndRunDeferred()
			if c.closed.Load() {
				return ErrGrantedAfterClose
			}
			return nil
		case waitTimedOut:
			sh.unlockAndRunDeferred()
			return ErrTimeout
		case waitClosed:
			sh.unlockAndRunDeferred()
			return ErrClosed
		case waitShareEnded:
			err := ErrReleased
			if w.upgrade.flags()&flagExpired != 0 {
				err = ErrLeaseExpired
			}
			sh.unlockAndRunDeferred()
			return err
		case waitWoken:
			if c.closed.Load() {
				sh.abandon(w, waitClosed)
				sh.unlockAndRunDeferred()
				return ErrClosed
			}
			e = h.e
			if e.holder == nil && !sh.rangeKeeps(e, w, c) {
				wall, now := ReadClock(c.clock)
				sh.unqueueGranted(e, w, now)
				h.w = nil
				sh.grantKey(e, h, wall, now, w.lease, e.head != nil || e.rangeWaitsOver())
				sh.unlockAndRunDeferred()
				return nil
			}
			// A newcomer took the key first; stay at the head of the queue.
			w.state = waitQueued
			e.wakePending = false
		}
		if err := ctx.Err(); err != nil {
			sh.abandon(w, waitCancelled)
			sh.unlockAndRunDeferred()
			return err
		}
		recheck := w.recheck
		w.recheck, w.checking = false, recheck
		sh.mu.Unlock()
		if recheck {
			// Checked as a new wait is: the graph's mutex orders this search after the change.
			if err := sh.tab.graph.enter(h); err != nil {
				return err
			}
			sh = h.lockShard()
			w.checking = false
			sh.mu.Unlock()
		}
	}
}
