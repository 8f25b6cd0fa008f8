package locktable

import (
	"testing"

	"pgregory.net/rapid"
)

// Replays of interleavings the model check found or that once slipped past it, through the
// model's own steps, so that each is checked on every run (model_test.go).

// The model's graph check holds the engine to strict FIFO past a request of no owner
// (docs/DESIGN.md §13), replayed through the model's own steps: b is held exclusively by o1 with
// o2's exclusive request and then o3's shared one queued; a is held shared by o3 with o4's
// exclusive request, a request of no owner (exclusive) and o1's shared one queued. o1's request
// cannot be granted before o4's, nor before o3 lets a go, so o3's request closes
// o3 → o1 → o4 → o3 and fails then. With o1's edge ending at the request of no owner, the cycle
// would persist until that request timed out, and the model names it.
func TestModelCatchesCycleBehindRequestOfNoOwner(t *testing.T) {
	replay(t, 1, func(rt *rapid.T, m *modelRun) {
		m.lock(rt, 1, tB, false, true, replayLease, replayTimeout)
		m.lock(rt, 3, tA, true, true, replayLease, replayTimeout)
		m.lock(rt, 4, tA, false, true, replayLease, replayTimeout)
		outside := m.lock(rt, 0, tA, false, true, replayLease, replayTimeout)
		m.lock(rt, 1, tA, true, true, replayLease, replayTimeout)
		m.lock(rt, 2, tB, false, true, replayLease, replayTimeout)
		m.lock(rt, 3, tB, true, true, replayLease, replayTimeout) // settle fails here if o1's edge ends at the outside request
		if m.deadlocks != 1 {
			rt.Fatalf("%d deadlocks reported, not the one o3's request closes: %s", m.deadlocks, m.describe())
		}
		m.cancel(rt, outside) // and replay requires no other deadlock after the outside request left
	})
}
