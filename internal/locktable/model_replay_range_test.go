package locktable

import (
	"flag"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Replays of range interleavings through the model's own steps (model_test.go): each builds a
// state in which a range's wait-for edges or its place in the queue are easy to get wrong, and
// the model's checks after every step say whether the table got them right.

// The check's targets by name: the keys a..d, then modelRanges in order.
const (
	tA, tB, tC, tD = 0, 1, 2, 3
	tAB            = modelKeys + iota - 1 // [a,b)
	tAC                                   // [a,c)
	tBD                                   // [b,d)
	tCUp                                  // [c,∞)
	tAll                                  // every key
)

// replayLease and replayTimeout outlast every replay, so that only its steps end anything.
const replayLease, replayTimeout = time.Second, time.Second

// replayChecks is how many times replay runs its steps unless -rapid.checks says otherwise: the
// steps draw nothing, so repeats differ only in how the goroutines interleave.
const replayChecks = "10"

// replay runs steps on a fresh model run and requires the table to have reported deadlocks
// deadlocks by the end.
func replay(t *testing.T, deadlocks int, steps func(rt *rapid.T, m *modelRun)) {
	if !flagSet("rapid.checks") {
		if err := flag.Set("rapid.checks", replayChecks); err != nil {
			t.Fatal(err)
		}
		defer flag.Set("rapid.checks", flag.Lookup("rapid.checks").DefValue)
	}
	rapid.Check(t, func(rt *rapid.T) {
		m := newModelRun(t, rt)
		defer m.finish(rt)
		steps(rt, m)
		if m.deadlocks != deadlocks {
			rt.Fatalf("%d deadlocks reported, not %d: %s", m.deadlocks, deadlocks, m.describe())
		}
	})
}

// A shared range waits for every conflicting exclusive request queued ahead of it, not only the
// nearest: o3 holds b and o4 holds a, both shared; o2's exclusive request for b queues (waiting
// for o3), then o1's for a (waiting for o4). o3's shared [a,c) conflicts with both and queues
// behind them. The nearer one, o1's, leads only to o4, which waits for nothing; the farther, o2's,
// waits for o3 itself, so o3's request closes o3 → o2 → o3 and must fail.
func TestModelRangeWaitsForEveryConflictingRequestAhead(t *testing.T) {
	replay(t, 1, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 3, tB, true, true, replayLease, replayTimeout)
		m.lock(rt, 4, tA, true, true, replayLease, replayTimeout)
		m.lock(rt, 2, tB, false, true, replayLease, replayTimeout)
		m.lock(rt, 1, tA, false, true, replayLease, replayTimeout)
		m.lock(rt, 3, tAC, true, true, replayLease, replayTimeout)
	})
}

// A key that is free still queues behind a queued exclusive range that contains it, and waits for
// it: o1 holds a shared; o2's exclusive [a,c) queues, waiting for o1; o3's exclusive d, outside
// the range, is granted at once; o1's shared b, free but inside the queued range, queues behind it
// and closes o1 → o2 → o1. Once o1 lets a go, the range is o2's.
func TestModelKeyQueuesBehindConflictingRange(t *testing.T) {
	replay(t, 1, func(rt *rapid.T, m *modelRun) {
		held := m.lock(rt, 1, tA, true, true, replayLease, replayTimeout)
		m.lock(rt, 2, tAC, false, true, replayLease, replayTimeout)
		m.lock(rt, 3, tD, false, true, replayLease, replayTimeout)
		m.lock(rt, 1, tB, true, true, replayLease, replayTimeout)
		h := m.heldBy(1, tA)
		if h == nil || h.h != held.h {
			rt.Fatalf("o1 does not hold a: %s", m.describe())
		}
		h.h.Release()
		m.drop(rt, h, false)
		m.settle(rt)
		if m.heldBy(2, tAC) == nil {
			rt.Fatalf("o2 was not granted [a,c) once a was free: %s", m.describe())
		}
	})
}

// Two upgrades through a range: o1 holds [a,c) shared and o2 holds b shared; o1's upgrade of the
// range waits for o2's share, and o2's upgrade of b waits for o1's, so the second fails and keeps
// its share, and the first goes through once o2 lets b go.
func TestModelRangeUpgradesDeadlock(t *testing.T) {
	replay(t, 1, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 1, tAC, true, true, replayLease, replayTimeout)
		m.lock(rt, 2, tB, true, true, replayLease, replayTimeout)
		m.lock(rt, 1, tAC, false, true, replayLease, replayTimeout)
		m.lock(rt, 2, tB, false, true, replayLease, replayTimeout)
		h := m.heldBy(2, tB)
		if h == nil || !h.shared {
			rt.Fatalf("o2 lost its share of b: %s", m.describe())
		}
		h.h.Release()
		m.drop(rt, h, false)
		m.settle(rt)
		if up := m.heldBy(1, tAC); up == nil || up.shared {
			rt.Fatalf("o1's upgrade of [a,c) did not go through: %s", m.describe())
		}
	})
}

// An owner can wait on itself through a request of no owner: o1 holds a; an exclusive request of
// no owner for a queues behind it; o1's exclusive [a,c) does not conflict with o1's own a, but it
// does with the request of no owner queued ahead, which waits for o1. Nothing but a timeout would
// end that wait, so o1's request must fail as a deadlock of o1 alone.
func TestModelRangeWaitsOnItsOwnerThroughRequestOfNoOwner(t *testing.T) {
	replay(t, 1, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 1, tA, false, true, replayLease, replayTimeout)
		m.lock(rt, 0, tA, false, true, replayLease, replayTimeout)
		m.lock(rt, 1, tAC, false, true, replayLease, replayTimeout)
	})
}

// A key granted while a range request over it is queued is watched, so that its lapse passes the
// range on: o1 holds [c,∞) exclusively; o3's exclusive d queues, then o2's exclusive [c,∞) behind
// it. When o1 lets the range go, d is o3's and o2's range waits for it; when o3's lease on d
// lapses, the range must be o2's at once, not whenever someone next looks at d.
func TestModelRangeGrantedAtLapseOfKeyGrantedWhileItWaited(t *testing.T) {
	replay(t, 0, func(rt *rapid.T, m *modelRun) {
		held := m.lock(rt, 1, tCUp, false, true, replayLease, replayTimeout)
		m.lock(rt, 3, tD, false, true, 20*time.Millisecond, replayTimeout)
		m.lock(rt, 2, tCUp, false, true, replayLease, replayTimeout)
		h := m.heldBy(1, tCUp)
		if h == nil || h.h != held.h {
			rt.Fatalf("o1 does not hold [c,∞): %s", m.describe())
		}
		h.h.Release()
		m.drop(rt, h, false)
		m.settle(rt)
		m.advance(rt, 25*time.Millisecond) // onto the end of o3's lease on d
		if m.heldBy(2, tCUp) == nil {
			rt.Fatalf("o2 was not granted [c,∞) once d lapsed: %s", m.describe())
		}
	})
}

// A newcomer does not barge past a waiter that a range keeps from a free key: o1 holds [a,c)
// shared, and an exclusive request of no owner for a queues, kept from the free key by that range.
// o1's own exclusive a conflicts with no holder (its range is its own), but it must queue behind
// the request ahead, not take the key within the barging window meant for a woken waiter; and
// there it waits for itself through that request, a deadlock of o1 alone.
func TestModelKeyNewcomerDoesNotPassWaiterKeptByRange(t *testing.T) {
	replay(t, 1, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 1, tAC, true, true, replayLease, replayTimeout)
		m.lock(rt, 0, tA, false, true, replayLease, replayTimeout)
		m.lock(rt, 1, tA, false, true, replayLease, replayTimeout)
	})
}

// A request of no owner passes on the requests queued ahead of it too, not only the holders it
// conflicts with: o1 holds [c,∞) exclusively; o3's shared [b,d) queues (waiting for o1), then an
// exclusive c of no owner (behind o3's request, which it conflicts with), then o1's shared [b,d),
// which conflicts only with the request of no owner. Through it, o1 waits for o3, which waits for
// o1: o1's request closes the cycle and must fail.
func TestModelRangeWaitsThroughRequestsAheadOfRequestOfNoOwner(t *testing.T) {
	replay(t, 1, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 1, tCUp, false, true, replayLease, replayTimeout)
		m.lock(rt, 3, tBD, true, true, replayLease, replayTimeout)
		m.lock(rt, 0, tC, false, true, replayLease, replayTimeout)
		m.lock(rt, 1, tBD, true, true, replayLease, replayTimeout)
	})
}

// In range mode a key's request waits for the requests queued ahead of it for its key: o1 holds
// [a,c) shared; o2's exclusive a queues, kept by o1's range; o1's own exclusive a conflicts with
// no holder, but it is served after o2's request, which waits for o1: o1 → o2 → o1. (Before range
// mode, requests ahead waited for the same holders as the one behind, and no edge to them was
// needed.)
func TestModelKeyWaitsForRequestAheadKeptByOwnRange(t *testing.T) {
	replay(t, 1, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 1, tAC, true, true, replayLease, replayTimeout)
		m.lock(rt, 2, tA, false, true, replayLease, replayTimeout)
		m.lock(rt, 1, tA, false, true, replayLease, replayTimeout)
	})
}
