package locktable

import "sync"

// clockSlots are the clocks of a table's open Lockers. A Locker's clockID indexes them, and every
// shard keeps one scheduler per slot in use. A scheduler exists exactly while its slot is taken:
// it is made when the first Locker of a clock opens and dropped when the last one closes, never
// on demand, so no handle of a closed Locker can bring a scheduler back to life with a dead clock.
type clockSlots struct {
	mu    sync.Mutex // taken before any shard mutex
	slots []clockSlot
}

// clockSlot is one clock of the table's open Lockers; a slot nobody uses any more is reused.
type clockSlot struct {
	c    Clock
	refs int // open Lockers on c
}

// openClock returns the slot of c among the clocks of this table's open Lockers, taking a
// reference that closeClock gives back. A slot newly taken gets a scheduler in every shard.
func (t *Table) openClock(c Clock) int {
	t.clocks.mu.Lock()
	defer t.clocks.mu.Unlock()
	free := -1
	for i, slot := range t.clocks.slots {
		switch {
		case slot.refs > 0 && sameClock(slot.c, c):
			t.clocks.slots[i].refs++
			return i
		case slot.refs == 0 && free < 0:
			free = i
		}
	}
	if free < 0 {
		t.clocks.slots = append(t.clocks.slots, clockSlot{})
		free = len(t.clocks.slots) - 1
	}
	t.clocks.slots[free] = clockSlot{c: c, refs: 1}
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.addScheduler(free, c)
		sh.mu.Unlock()
	}
	return free
}

// closeClock gives back a reference taken by openClock, when a Locker closes. The last one stops
// and drops the clock's schedulers, so that Lockers that come and go with clocks of their own
// leave nothing behind. The closing Locker has nothing scheduled any more: Close released its
// handles and failed its waiters first, and the table grants nothing to a closed Locker.
func (t *Table) closeClock(id int) {
	t.clocks.mu.Lock()
	defer t.clocks.mu.Unlock()
	t.clocks.slots[id].refs--
	if t.clocks.slots[id].refs > 0 {
		return
	}
	t.clocks.slots[id].c = nil
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.dropScheduler(id)
		sh.mu.Unlock()
	}
}

// sameClock compares two clocks without panicking on an incomparable implementation.
func sameClock(a, b Clock) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}
