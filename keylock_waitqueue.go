package recordlock

import (
	"context"
	"errors"
	"time"
)

// waitState is where a waiter stands; it changes only under the shard mutex.
type waitState uint8

const (
	waitQueued    waitState = iota // in the queue, asleep
	waitWoken                      // the key was freed and this waiter was woken to take it
	waitGranted                    // the key was handed to this waiter directly
	waitTimedOut                   // Options.Timeout passed
	waitClosed                     // its Locker was closed
	waitCancelled                  // its ctx was done
	waitDeadlock                   // waiting would have closed a cycle of Txns
)

// waiter is a Lock call queued for a busy key. It exists only while the call waits. Its fields
// are guarded by the shard mutex.
type waiter struct {
	h          *Handle // the handle it becomes when granted
	next, prev *waiter
	since      time.Duration // Mono of h's clock when it queued
	lease      time.Duration // the lease h gets when granted
	wake       chan struct{} // one buffered slot: a wake-up is never lost and never blocks
	state      waitState
	counted    bool // counted in Stats.Waiting
}

// mode reports what w asks for: a shared lock, or the upgrade of a shared lock its Txn holds.
// The table grants exclusive locks only, so every request is exclusive and none is an upgrade.
func (w *waiter) mode() (shared, upgrade bool) { return false, false }

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *waiter) finish(s waitState) {
	w.state = s
	w.h.w = nil
	w.signal()
}

// pastBargeWindow reports whether w, the oldest waiter of a free key, has waited bargeWindow, so
// that the key goes to it rather than to a newcomer. mono is a reading of c's clock.
func (w *waiter) pastBargeWindow(c *tenant, mono time.Duration) bool {
	return w.h.monoFor(c, mono)-w.since >= bargeWindow
}

// errGrantedAfterClose is what wait reports when the key was handed to h but h's Locker closed
// meanwhile: the caller gives the key back and fails with ErrClosed. It never reaches the user.
var errGrantedAfterClose = errors.New("recordlock: key granted after Close")

// wait queues h for e's key and blocks until it is granted, the timeout passes at deadline, ctx is
// done or the Locker closes (errGrantedAfterClose when a grant raced with that). A Txn's wait is
// first checked for a deadlock. It is called with mu held and returns with it released.
func (sh *shard) wait(ctx context.Context, e *keyEntry, h *Handle, lease, deadline, mono time.Duration) error {
	c := h.tenant()
	w := &waiter{h: h, since: mono, lease: lease, wake: make(chan struct{}, 1)}
	h.w, h.e = w, e
	sh.enqueue(e, w)
	h.deadline.Store(int64(deadline)) // the wait's timeout until the key is granted
	sh.schedule(h)
	if e.holder != nil {
		sh.watch(e.holder) // the key must pass on at the holder's deadline
	}
	if h.owner == nil {
		sh.countWaiting(w)
	}
	sh.unlockAndRunHooks()
	if h.owner != nil {
		if err := sh.tab.graph.enter(sh, h); err != nil {
			return err
		}
		defer sh.tab.graph.leave(h)
		sh.mu.Lock()
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
		sh.mu.Lock()
		switch w.state {
		case waitGranted:
			sh.unlockAndRunHooks()
			if c.closed.Load() {
				return errGrantedAfterClose
			}
			return nil
		case waitTimedOut:
			sh.unlockAndRunHooks()
			return ErrTimeout
		case waitClosed:
			sh.unlockAndRunHooks()
			return ErrClosed
		case waitWoken:
			if c.closed.Load() {
				sh.abandon(w, waitClosed)
				sh.unlockAndRunHooks()
				return ErrClosed
			}
			if e.holder == nil {
				sh.dequeue(e, w)
				sh.unschedule(h)
				h.w = nil
				wall, now := readClock(c.clock)
				sh.countWait(w, now)
				sh.grant(e, h, wall, now, lease)
				sh.unlockAndRunHooks()
				return nil
			}
			// A newcomer took the key first; stay at the head of the queue.
			w.state = waitQueued
			e.wakePending = false
		}
		if err := ctx.Err(); err != nil {
			sh.abandon(w, waitCancelled)
			sh.unlockAndRunHooks()
			return err
		}
		sh.mu.Unlock()
	}
}

// enqueue appends w to e's wait queue.
func (sh *shard) enqueue(e *keyEntry, w *waiter) {
	w.prev = e.tail
	if e.tail != nil {
		e.tail.next = w
	} else {
		e.head = w
	}
	e.tail = w
}

// dequeue unlinks w from e's wait queue.
func (sh *shard) dequeue(e *keyEntry, w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		e.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		e.tail = w.prev
	}
	w.next, w.prev = nil, nil
	if w.state == waitWoken {
		e.wakePending = false
	}
	if w.counted {
		w.counted = false
		sh.counts.waiting--
	}
}

// countWaiting counts w, queued with its timers armed, in Stats.Waiting.
func (sh *shard) countWaiting(w *waiter) {
	w.counted = true
	sh.counts.waiting++
}

// abandon removes a waiter that gives up (timeout, ctx, Close, deadlock) and passes the key on if
// it was the one woken for it.
func (sh *shard) abandon(w *waiter, outcome waitState) {
	e := w.h.e
	sh.dequeue(e, w)
	w.h.e = nil
	sh.unschedule(w.h)
	w.finish(outcome)
	switch outcome {
	case waitTimedOut:
		sh.counts.timeouts++
	case waitCancelled:
		sh.counts.canceled++
	case waitDeadlock:
		sh.counts.deadlocks++
	}
	sh.passOn(e)
}
