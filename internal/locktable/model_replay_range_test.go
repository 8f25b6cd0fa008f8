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

// The check's targets by name: the keys a..d, e of the other column family, then modelRanges in
// order.
const (
	tA, tB, tC, tD = 0, 1, 2, 3
	tE             = modelOtherCF
	tAB            = modelKeys + iota - 2 // [a,b)
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

// A shared range waits for the conflicting exclusive requests queued ahead of it that it does not
// pass, and passes one that waits for its owner through another owner's wait: o4 holds c shared
// and o2's exclusive c queues, waiting for o4; o3 holds a and o4's exclusive a queues, waiting for
// o3; a request of no owner holds d shared and o1's exclusive d queues behind it. o3's shared
// [c,∞) conflicts with o1's and o2's requests. o2's waits for o4, which waits for o3's a, below
// the range o3 asks: o3 passes it, where waiting behind it would close o3 → o2 → o4 → o3. o1's
// waits for no owner's lock: o3 waits behind it, and is granted once d is free and o1 has had it.
func TestModelRangeWaitsForEveryConflictingRequestAhead(t *testing.T) {
	replay(t, 0, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 4, tC, true, true, replayLease, replayTimeout)
		m.lock(rt, 2, tC, false, true, replayLease, replayTimeout)
		m.lock(rt, 3, tA, false, true, replayLease, replayTimeout)
		m.lock(rt, 4, tA, false, true, replayLease, replayTimeout)
		outside := m.lock(rt, 0, tD, true, true, replayLease, replayTimeout)
		m.lock(rt, 1, tD, false, true, replayLease, replayTimeout)
		m.lock(rt, 3, tCUp, true, true, replayLease, replayTimeout)
		if m.request(3) == nil {
			rt.Fatalf("o3's range did not wait behind o1's request: %s", m.describe())
		}
		for _, o := range []int{0, 1} {
			h := m.heldBy(o, tD)
			if o == 0 {
				h = m.holdOf(outside)
			}
			if h == nil {
				rt.Fatalf("o%d does not hold d: %s", o, m.describe())
			}
			h.h.Release()
			m.drop(rt, h, false)
			m.settle(rt)
		}
		if m.heldBy(3, tCUp) == nil {
			rt.Fatalf("o3 was not granted [c,∞) once d was free: %s", m.describe())
		}
	})
}

// A key that is free still queues behind a queued exclusive range that contains it, unless the
// range waits for the key's owner: o1 holds a shared; o2's exclusive [a,c) queues, waiting for
// o1; o3's exclusive d, outside the range, is granted at once; o4's shared b, free but inside the
// queued range, queues behind it; o1's shared b passes both, since they wait for o1's a (the
// range itself, o4's request through it). Once o1 lets a go the range still waits for o1's b, and
// once o1 lets b go too, the range is o2's.
func TestModelKeyQueuesBehindConflictingRange(t *testing.T) {
	replay(t, 0, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 1, tA, true, true, replayLease, replayTimeout)
		m.lock(rt, 2, tAC, false, true, replayLease, replayTimeout)
		m.lock(rt, 3, tD, false, true, replayLease, replayTimeout)
		m.lock(rt, 4, tB, true, true, replayLease, replayTimeout)
		if m.request(4) == nil {
			rt.Fatalf("o4's shared b did not queue behind the range: %s", m.describe())
		}
		m.lock(rt, 1, tB, true, true, replayLease, replayTimeout)
		for _, k := range []int{tA, tB} {
			h := m.heldBy(1, k)
			if h == nil {
				rt.Fatalf("o1 does not hold %s: %s", targetName(k), m.describe())
			}
			if m.heldBy(2, tAC) != nil {
				rt.Fatalf("o2 was granted [a,c) while o1 holds %s: %s", targetName(k), m.describe())
			}
			h.h.Release()
			m.drop(rt, h, false)
			m.settle(rt)
		}
		if m.heldBy(2, tAC) == nil {
			rt.Fatalf("o2 was not granted [a,c) once a and b were free: %s", m.describe())
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

// An owner passes a request of no owner that waits for it: o1 holds a; an exclusive request of no
// owner for a queues behind it; o1's exclusive [a,c) does not conflict with o1's own a, and it
// passes the request of no owner, which cannot be served before o1 lets a go anyway. Waiting
// behind it, o1 would wait for itself.
func TestModelRangeWaitsOnItsOwnerThroughRequestOfNoOwner(t *testing.T) {
	replay(t, 0, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 1, tA, false, true, replayLease, replayTimeout)
		m.lock(rt, 0, tA, false, true, replayLease, replayTimeout)
		m.lock(rt, 1, tAC, false, true, replayLease, replayTimeout)
		if m.heldBy(1, tAC) == nil {
			rt.Fatalf("o1 did not pass the request that waits for it: %s", m.describe())
		}
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
// o2's exclusive a, which holds nothing, queues behind it rather than take the key within the
// barging window meant for a woken waiter. o1's own exclusive a passes both, which wait for o1's
// range, and takes the key.
func TestModelKeyNewcomerDoesNotPassWaiterKeptByRange(t *testing.T) {
	replay(t, 0, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 1, tAC, true, true, replayLease, replayTimeout)
		m.lock(rt, 0, tA, false, true, replayLease, replayTimeout)
		m.lock(rt, 2, tA, false, true, replayLease, replayTimeout)
		if m.request(2) == nil {
			rt.Fatalf("o2's exclusive a did not queue: %s", m.describe())
		}
		m.lock(rt, 1, tA, false, true, replayLease, replayTimeout)
		if m.heldBy(1, tA) == nil {
			rt.Fatalf("o1 did not pass the requests that wait for its range: %s", m.describe())
		}
	})
}

// An owner passes a request that waits for it through the requests queued ahead of it: o1 holds
// [a,c) exclusively; o3's shared [b,d) queues (waiting for o1), then an exclusive c of no owner
// (behind o3's request, which it conflicts with); o1's shared [b,d) conflicts only with the
// request of no owner, which does not conflict with o1's range, but waits behind o3's request,
// which waits for o1's range, whose start a is below b. So o1 passes it and takes [b,d).
func TestModelRangeWaitsThroughRequestsAheadOfRequestOfNoOwner(t *testing.T) {
	replay(t, 0, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 1, tAC, false, true, replayLease, replayTimeout)
		m.lock(rt, 3, tBD, true, true, replayLease, replayTimeout)
		m.lock(rt, 0, tC, false, true, replayLease, replayTimeout)
		m.lock(rt, 1, tBD, true, true, replayLease, replayTimeout)
		if m.heldBy(1, tBD) == nil {
			rt.Fatalf("o1 did not pass the request that waits for it through o3's: %s", m.describe())
		}
	})
}

// An owner that asks below a lock it holds passes no request through another owner's wait
// (docs/DESIGN.md §17.2): o1 holds [c,∞) exclusively; o3's shared [b,d) queues (waiting
// for o1), then an exclusive b of no owner behind it. o1's shared [b,d) waits behind the request
// of no owner, which waits for o1 only through o3's request, at c, above b: o1 → o3 → o1 is a
// cycle, and o1's request fails as a deadlock.
func TestModelRangeBelowItsLockDoesNotPassThroughRequestsAhead(t *testing.T) {
	replay(t, 1, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 1, tCUp, false, true, replayLease, replayTimeout)
		m.lock(rt, 3, tBD, true, true, replayLease, replayTimeout)
		m.lock(rt, 0, tB, false, true, replayLease, replayTimeout)
		m.lock(rt, 1, tBD, true, true, replayLease, replayTimeout)
	})
}

// In a home shard a key's request waits for the requests queued ahead of it for its key: o1 holds d;
// o3 holds [a,c) shared; o2's exclusive a queues, kept by o3's range; o1's exclusive a conflicts
// with no holder, but it is served after o2's request, which does not wait for o1. When o3 then
// asks for d, it closes o3 → o1 → o2 → o3 and must fail. (Where no range covers a key, requests ahead
// wait for the same holders as the one behind, and no edge to them is needed.)
func TestModelKeyWaitsForRequestAheadKeptByRange(t *testing.T) {
	replay(t, 1, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 1, tD, false, true, replayLease, replayTimeout)
		m.lock(rt, 3, tAC, true, true, replayLease, replayTimeout)
		m.lock(rt, 2, tA, false, true, replayLease, replayTimeout)
		m.lock(rt, 1, tA, false, true, replayLease, replayTimeout)
		m.lock(rt, 3, tD, false, true, replayLease, replayTimeout)
	})
}

// A request that passed others keeps passing them when its owner's lock ends while they wait
// behind its own request: o3 holds [c,∞) shared, o4 holds a shared and o1 holds every key shared;
// o4's exclusive c queues (waiting for o3 and o1). o1's exclusive c passes it, since it waits for
// o1's range, and queues ahead of it, for o3. When o1's range is revoked, o4's request still waits
// behind o1's: o1 passes it still, rather than wait behind it in a cycle, and takes c once o3 lets
// its range go. (A request of another owner queued behind o4's would wait for o1 only through
// o4's request, and such a chain ends only at a lock of o1, §17.2: o1 would not pass it.)
func TestModelOwnerStillPassesRequestBehindItsOwn(t *testing.T) {
	replay(t, 0, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 3, tCUp, true, true, replayLease, replayTimeout)
		m.lock(rt, 4, tA, true, true, replayLease, replayTimeout)
		m.lock(rt, 1, tAll, true, true, replayLease, replayTimeout)
		m.lock(rt, 4, tC, false, true, replayLease, replayTimeout)
		m.lock(rt, 1, tC, false, true, replayLease, replayTimeout)
		if m.request(1) == nil || m.request(4) == nil {
			rt.Fatalf("o1's and o4's requests for c do not both wait: %s", m.describe())
		}
		for _, o := range []int{1, 3} {
			t := map[int]int{1: tAll, 3: tCUp}[o]
			h := m.heldBy(o, t)
			if h == nil {
				rt.Fatalf("o%d does not hold %s: %s", o, targetName(t), m.describe())
			}
			h.h.Revoke()
			m.drop(rt, h, true)
			m.settle(rt)
		}
		if m.heldBy(1, tC) == nil {
			rt.Fatalf("o1 was not granted c: %s", m.describe())
		}
	})
}

// A request passes one it queued behind once a later wait makes that one wait for its owner
// (found by TestModelOrderedWriters): o3 holds a; o4's shared range over every key queues, waiting
// for o3; o2 holds b shared; o1, holding nothing, asks for d exclusively and queues behind o4's
// range; o2's exclusive d queues behind o1's request, which waits for no lock of o2. Then o3 asks
// for b, waiting for o2's share: now o4's range waits for o2 through o3's wait, and so does o1's
// request behind it. o2 must pass both and take d; left behind o1's request, it would close
// o2 → o1 → o4 → o3 → o2 among writers that lock in key order.
func TestModelOwnerPassesRequestAheadThatComesToWaitForIt(t *testing.T) {
	replay(t, 0, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 3, tA, false, true, replayLease, replayTimeout)
		m.lock(rt, 4, tAll, true, true, replayLease, replayTimeout)
		m.lock(rt, 2, tB, true, true, replayLease, replayTimeout)
		m.lock(rt, 1, tD, false, true, replayLease, replayTimeout)
		m.lock(rt, 2, tD, false, true, replayLease, replayTimeout)
		if m.request(1) == nil || m.request(2) == nil {
			rt.Fatalf("o1's and o2's requests for d do not both wait: %s", m.describe())
		}
		m.lock(rt, 3, tB, false, true, replayLease, replayTimeout)
		if m.heldBy(2, tD) == nil {
			rt.Fatalf("o2 did not pass the requests that came to wait for it: %s", m.describe())
		}
	})
}

// The cycle through an exclusive range queued ahead of a shared key request: o1
// holds b shared and o2 holds e, of the other column family; o3's exclusive [a,c) queues behind
// o1's share, and o2's shared b behind o3's range; then o1 asks for e. o2 passes nothing, since
// o1 waits in the other column family, so o2's edge to o3's range closes o1 → o2 → o3 → o1, a
// deadlock, and o3, then o2, are served once o1 lets go.
func TestModelSharedKeyWaitsForExclusiveRangeQueuedAhead(t *testing.T) {
	replay(t, 1, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 1, tB, true, true, replayLease, replayTimeout)
		m.lock(rt, 2, tE, false, true, replayLease, replayTimeout)
		m.lock(rt, 3, tAC, false, true, replayLease, replayTimeout)
		m.lock(rt, 2, tB, true, true, replayLease, replayTimeout)
		m.lock(rt, 1, tE, false, true, replayLease, replayTimeout)
	})
}

// The same cycle within one column family (docs/DESIGN.md §17.2): o1 holds b
// shared and o2 holds d; o3's exclusive [a,c) queues behind o1's share, and o2's shared b behind
// o3's range; then o1 asks for d. o3's range waits for o2 only through o1's wait, at o2's d, above
// the b o2 asks: o2 asks below a key it holds and passes nothing, so its edge to o3's range closes
// o1 → o2 → o3 → o1, and o1's request fails as a deadlock. Once o1 lets b go, o3's range is
// served, and o2's b only once o3 lets it go.
func TestModelSharedKeyWaitsForExclusiveRangeQueuedAheadInOneColumnFamily(t *testing.T) {
	replay(t, 1, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 1, tB, true, true, replayLease, replayTimeout)
		m.lock(rt, 2, tD, false, true, replayLease, replayTimeout)
		m.lock(rt, 3, tAC, false, true, replayLease, replayTimeout)
		m.lock(rt, 2, tB, true, true, replayLease, replayTimeout)
		m.lock(rt, 1, tD, false, true, replayLease, replayTimeout)
		if m.deadlocks != 1 {
			rt.Fatalf("o1's request for d closes o1 → o2 → o3 → o1 (o2's shared b waits "+
				"for o3's exclusive range queued ahead of it) and must fail as a deadlock: %s", m.describe())
		}
		for _, step := range []struct {
			o, t   int
			served int
		}{{1, tB, 3}, {3, tAC, 2}} {
			h := m.heldBy(step.o, step.t)
			if h == nil {
				rt.Fatalf("o%d does not hold %s: %s", step.o, targetName(step.t), m.describe())
			}
			h.h.Release()
			m.drop(rt, h, false)
			m.settle(rt)
			if m.request(step.served) != nil {
				rt.Fatalf("o%d was not served once o%d let %s go: %s", step.served, step.o, targetName(step.t), m.describe())
			}
			if step.o == 1 && m.request(2) == nil {
				rt.Fatalf("o2's shared b was served before o3's exclusive range queued ahead of it: %s", m.describe())
			}
		}
	})
}

// An owner that locks in key order passes every range queued ahead of it that waits for it through
// another owner's wait, the ranges queued behind such a range too (docs/DESIGN.md §17.2):
// o1 holds a and o2 holds b shared; o3's shared range over every key queues for o1's a, and o4's
// exclusive [c,∞) behind it; o1 asks for b and waits for o2. o2 then asks for d: o3's range waits
// for o2 through o1's wait, and o4's through o3's, each chain ending at o2's b, below d, so o2
// passes both and takes d, and no cycle is closed.
func TestModelOrderedOwnerPassesRangesQueuedAheadThroughAnotherOwnersWait(t *testing.T) {
	replay(t, 0, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 1, tA, false, true, replayLease, replayTimeout)
		m.lock(rt, 2, tB, true, true, replayLease, replayTimeout)
		m.lock(rt, 3, tAll, true, true, replayLease, replayTimeout)
		m.lock(rt, 4, tCUp, false, true, replayLease, replayTimeout)
		m.lock(rt, 1, tB, false, true, replayLease, replayTimeout)
		m.lock(rt, 2, tD, false, true, replayLease, replayTimeout)
		if m.heldBy(2, tD) == nil {
			rt.Fatalf("o2 locks in key order and did not pass the ranges that wait for it through o1's wait: %s", m.describe())
		}
	})
}

// An owner that asks for the key its range starts at asks inside a range it holds, and passes the
// waiters of that range through the requests ahead of them (docs/DESIGN.md §17.2): o3
// holds [a,b) shared; an exclusive a of no owner queues for it, and a shared [a,c) of no owner
// behind that. o3's exclusive a passes both: the second waits for o3 only through the first, and
// the chain ends at o3's range, which starts at a.
func TestModelOwnerAsksAtTheStartOfItsRange(t *testing.T) {
	replay(t, 0, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 3, tAB, true, true, replayLease, replayTimeout)
		m.lock(rt, 0, tA, false, true, replayLease, replayTimeout)
		m.lock(rt, 0, tAC, true, true, replayLease, replayTimeout)
		m.lock(rt, 3, tA, false, true, replayLease, replayTimeout)
	})
}

// One victim's leaving can end the passes of another owner's request and so close a cycle that
// was not there while it waited (docs/DESIGN.md §17.3), which the table finds when it checks that
// wait again: o3 holds c and o1 holds b; an exclusive c of no owner queues behind o3's, an
// exclusive [c,∞) of no owner behind it, and o1's shared c behind both. o3's shared range over
// every key waits for o1's b, below c: o1's request passes both requests of no owner, which wait
// for o3's c, and is moved ahead of the one for c in c's queue, and o3's request closes
// o3 → o1 → o3 and fails (o1's wait, checked again as o1's request moves, finds no cycle before
// o3's request enters the graph, and that one finds it as it enters). Then o1's passes end: its
// request waits for the range again, which waits for the request for c, now behind o1's own in
// c's queue, and o1 → o1 fails too, a cycle only once o3's request has left. The model checks
// each victim's cycle on the state that those before it left.
func TestModelVictimLeavingClosesAnotherCycle(t *testing.T) {
	replay(t, 2, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 3, tC, false, true, replayLease, replayTimeout)
		m.lock(rt, 1, tB, false, true, replayLease, replayTimeout)
		m.lock(rt, 0, tC, false, true, replayLease, replayTimeout)
		m.lock(rt, 0, tCUp, false, true, replayLease, replayTimeout)
		m.lock(rt, 1, tC, true, true, replayLease, replayTimeout)
		m.lock(rt, 3, tAll, true, true, replayLease, replayTimeout)
		if m.request(1) != nil || m.request(3) != nil {
			rt.Fatalf("o1 and o3 still wait: %s", m.describe())
		}
	})
}

// A lapsed share counts for nothing once its deadline has passed, also to a request that may pass
// a queued one: o4's share of d lapses with nothing watching it, a request of no owner shares d,
// and an exclusive d of no owner queues behind that share alone. o4, which holds a, then asks for
// a shared range over every key: it conflicts with the queued exclusive d, which does not wait
// for o4, so it may not pass it and a TryLock of it fails. Left unsettled until a timer ran, o4's
// lapsed share made the queued request one that waits for o4, and the range passed it.
func TestModelLapsedShareIsNotWaitedFor(t *testing.T) {
	replay(t, 0, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 4, tD, true, true, 20*time.Millisecond, replayTimeout)
		m.advance(rt, 40*time.Millisecond)
		m.lock(rt, 4, tA, false, true, replayLease, replayTimeout)
		m.lock(rt, 0, tD, true, true, replayLease, replayTimeout)
		m.lock(rt, 0, tD, false, true, replayLease, replayTimeout)
		m.lock(rt, 4, tAll, true, false, replayLease, replayTimeout)
	})
}
