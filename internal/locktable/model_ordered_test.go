package locktable

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The model check of ordered writers beside range locks (docs/DESIGN.md §17.2): owners 1 to 3 are
// writers, each locking keys, shared or exclusive, in key order (a key above every key it holds);
// owner 4 takes one range lock at a time, shared or exclusive, and holds nothing else. Owners that
// lock so never wait for each other in a cycle, so any DeadlockError fails the check, which
// otherwise holds the table to the model after every step as TestModel does. Each sequence ends by
// giving back what is held, one lock at a time, until nothing is queued: every request, of a range
// or a key, is served once what it waits for has ended.
func TestModelOrderedWriters(t *testing.T) {
	useModelSize(t)
	rapid.Check(t, func(rt *rapid.T) {
		m := newModelRun(t, rt)
		defer m.finish(rt)
		rt.Repeat(map[string]func(*rapid.T){
			"write":   m.stepOrderedWrite,
			"write2":  m.stepOrderedWrite,
			"read":    m.stepRangeOwner,
			"release": func(rt *rapid.T) { m.stepEnd(rt, false) },
			"advance": m.stepAdvance,
			"": func(rt *rapid.T) {
				if m.deadlocks != 0 {
					rt.Fatalf("owners that lock in order met %d deadlocks: %s", m.deadlocks, m.describe())
				}
			},
		})
		m.drain(rt)
	})
}

// rangeOwner is the owner of TestModelOrderedWriters that takes one range lock at a time.
const rangeOwner = modelOwners

// stepOrderedWrite is a writer's lock of a key above every key it holds.
func (m *modelRun) stepOrderedWrite(rt *rapid.T) {
	o := rapid.IntRange(1, rangeOwner-1).Draw(rt, "writer")
	k := rapid.IntRange(0, modelKeys-1).Draw(rt, "key")
	shared := rapid.Bool().Draw(rt, "shared")
	if m.waiting(o) {
		rt.Skip("an owner waits for one lock at a time")
	}
	for _, h := range m.holds {
		if h.owner == o && h.target >= k {
			rt.Skip("a writer locks its keys in key order")
		}
	}
	m.lock(rt, o, k, shared, true, m.orderedLease(rt), m.orderedTimeout(rt))
}

// stepRangeOwner is the range owner's lock of a range, while it holds nothing.
func (m *modelRun) stepRangeOwner(rt *rapid.T) {
	t := rapid.IntRange(modelKeys, modelTargets-1).Draw(rt, "range")
	shared := rapid.Bool().Draw(rt, "shared")
	if m.waiting(rangeOwner) || m.holdsAny(rangeOwner) {
		rt.Skip("the range owner takes one range lock at a time")
	}
	m.lock(rt, rangeOwner, t, shared, true, m.orderedLease(rt), m.orderedTimeout(rt))
}

// orderedLease and orderedTimeout draw a lease and a timeout as TestModel's lock step does.
func (m *modelRun) orderedLease(rt *rapid.T) time.Duration {
	return time.Duration(rapid.SampledFrom([]int{20, 50, 100}).Draw(rt, "lease"))*time.Millisecond + m.spread()
}

func (m *modelRun) orderedTimeout(rt *rapid.T) time.Duration {
	return time.Duration(rapid.SampledFrom([]int{30, 70}).Draw(rt, "timeout"))*time.Millisecond + m.spread()
}

// drain gives back the model's locks one at a time, oldest first, until nothing is held or
// queued: with nothing held, nothing may wait.
func (m *modelRun) drain(rt *rapid.T) {
	for len(m.holds) > 0 {
		h := m.holds[0]
		if !h.h.Release() {
			rt.Fatalf("Release of a live claim (lease ends at %v, now %v) returned false", h.deadline, m.now)
		}
		m.drop(rt, h, false)
		m.settle(rt)
	}
	if len(m.queue) > 0 {
		rt.Fatalf("requests wait with nothing held: %s", m.describe())
	}
}
