package locktable

import "time"

// shrinkAfter is the capacity above which a scheduler's heap array is let go once empty, so that
// a table whose keys come and go returns to its idle size (a shard keeps at most this many
// pointers' worth after a burst; below it, a shard whose load swings does not reallocate).
const shrinkAfter = 64

// scheduler keeps the deadlines (lease ends and wait timeouts) of one shard on one clock in a
// heap, and one timer armed for the earliest. The timer is re-armed only when an earlier deadline
// arrives, so an uncontended Lock and Release touch no runtime timer. Every field is guarded by
// the shard mutex, and the timer's callback reads none of them before it takes that mutex.
type scheduler struct {
	// What every Lock and Release touches comes first, in one cache line.
	heap    deadlineHeap
	timer   Timer
	armedAt time.Duration
	own     [2]*Claim // the heap's first storage, in the shard's own cache lines

	clock Clock  // nil while the clock slot is free
	gen   uint64 // identifies the current timer; a stale callback sees a newer one and returns
}

// addScheduler makes the scheduler of clock slot id, which a Locker of clock c has just taken.
// The first slot's scheduler lives inside the shard, one pointer less on every Lock and Release.
func (sh *shard) addScheduler(id int, c Clock) {
	if id == 0 {
		sh.firstSched.clock = c
		return
	}
	for len(sh.moreScheds) < id {
		sh.moreScheds = append(sh.moreScheds, nil)
	}
	sh.moreScheds[id-1] = &scheduler{clock: c}
}

// dropScheduler stops and forgets the scheduler of clock slot id, whose heap is empty. Only
// guarded fields change, so a callback of its old timer that is already on its way finds the
// generation moved on once it has the mutex.
func (sh *shard) dropScheduler(id int) {
	s := sh.scheduler(id)
	if s == nil {
		return
	}
	s.disarm()
	s.gen++
	s.heap, s.armedAt, s.clock = nil, 0, nil
	clear(s.own[:])
	if id > 0 {
		sh.moreScheds[id-1] = nil
	}
}

// scheduler returns the scheduler of clock slot id, or nil when the slot is free.
func (sh *shard) scheduler(id int) *scheduler {
	if id == 0 {
		if sh.firstSched.clock == nil {
			return nil
		}
		return &sh.firstSched
	}
	if i := id - 1; i < len(sh.moreScheds) {
		return sh.moreScheds[i]
	}
	return nil
}

// schedule puts h on its clock's heap at h.dueAt(): its lease end, or its wait's timeout while
// it waits. Only a handle of an open Locker is scheduled, whose clock has its scheduler.
func (sh *shard) schedule(h *Claim) {
	s := sh.scheduler(h.ten.clockID)
	if s == nil {
		sh.tab.logFault(h.ten, "a deadline on a clock no open Locker uses")
		return
	}
	if s.heap == nil {
		s.heap = s.own[:0]
	}
	movesOut := len(s.heap) == len(s.own) && cap(s.heap) == len(s.own) // only own has that capacity
	s.heap.push(h)
	if movesOut {
		// append moved the heap out of own: what own still points to must not pin dead handles.
		clear(s.own[:])
	}
	s.armFor(sh, h.dueAt())
}

// unschedule takes h off its heap, if it is on one.
func (sh *shard) unschedule(h *Claim) {
	if h.heapIdx < 0 {
		return
	}
	if s := sh.scheduler(h.ten.clockID); s != nil {
		s.remove(h)
	}
	h.heapIdx = -1
}

// reschedule moves h, which is on its heap, to its new dueAt.
func (sh *shard) reschedule(h *Claim) {
	sh.unschedule(h)
	sh.schedule(h)
}

// remove unschedules h; it is a no-op for a handle that is not scheduled here.
func (s *scheduler) remove(h *Claim) {
	i := int(h.heapIdx)
	if i < 0 || i >= len(s.heap) || s.heap[i] != h {
		return
	}
	s.heap.removeAt(i)
	if len(s.heap) == 0 && cap(s.heap) > shrinkAfter {
		s.heap = nil
	}
}

// armFor makes the timer fire no later than at. The delay is measured from a reading taken now,
// not from one the caller took before it waited for the mutex.
func (s *scheduler) armFor(sh *shard, at time.Duration) {
	if s.timer != nil && s.armedAt <= at {
		return
	}
	s.disarm()
	s.gen++
	gen := s.gen
	s.armedAt = at
	s.timer = s.clock.AfterFunc(at-s.clock.Mono(), func() { sh.fire(s, gen) })
}

func (s *scheduler) disarm() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// fire, the callback of s's timer, takes sh's mutex, expires every lease and times out every
// wait of s that has fallen due, then re-arms.
func (sh *shard) fire(s *scheduler, gen uint64) {
	sh.mu.Lock()
	if gen != s.gen || s.timer == nil {
		sh.mu.Unlock()
		return
	}
	s.timer = nil
	now := s.clock.Mono()
	for len(s.heap) > 0 && s.heap[0].dueAt() <= now {
		h := s.heap[0]
		if w := h.w; w != nil {
			sh.abandon(w, waitTimedOut)
		} else {
			sh.expire(h)
		}
		s.remove(h) // a no-op unless the branch above left it scheduled
	}
	if len(s.heap) > 0 {
		s.armFor(sh, s.heap[0].dueAt())
	}
	sh.unlockAndRunDeferred()
}
