package locktable

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The model check's comparison of the table with the model after every step, and its brute-force
// search of the wait-for graph (model_test.go drives the steps).

// settle waits for every request to return or be queued with its deadlock check done, matches
// how each that returned ended with the model, takes the deadlock victims out of the model,
// compares the table with the model and brute-forces the wait-for graph.
func (m *modelRun) settle(rt *rapid.T) {
	modelSteps.Add(1)
	m.clk.Advance(0) // a deadline armed already passed falls due now, as on the real clock
	deadline := time.Now().Add(10 * time.Second)
	for {
		pending := false
		for k := range modelKeys {
			for _, r := range m.queues[k] {
				if !m.queuedInTable(r) && len(r.done) == 0 {
					pending = true
				}
			}
		}
		for r := range m.ended {
			if len(r.done) == 0 {
				pending = true
			}
		}
		if !pending {
			break
		}
		if time.Now().After(deadline) {
			rt.Fatalf("the table did not settle: %s", m.describe())
		}
		time.Sleep(20 * time.Microsecond)
	}
	// Requests the model ended must have ended so.
	for r, want := range m.ended {
		got := r.result()
		if !errors.Is(got, want) && !(want == nil && got == nil) {
			rt.Fatalf("%v ended with %v, the model says %v", r, got, want)
		}
	}
	clear(m.ended)
	// Requests the model still queues may have failed only as deadlock victims.
	m.victims = m.victims[:0]
	for k := range modelKeys {
		for _, r := range m.queues[k] {
			if len(r.done) == 0 {
				continue
			}
			err := r.result()
			var dl *DeadlockError
			if !errors.As(err, &dl) {
				rt.Fatalf("%v ended with %v while the model queues it: %s", r, err, m.describe())
			}
			m.checkNamesCycle(rt, r, dl)
			modelDeadlocks.Add(1)
			m.deadlocks++
			m.victims = append(m.victims, r)
		}
	}
	for _, r := range m.victims {
		m.dequeue(r, nil)
		delete(m.ended, r)
	}
	if len(m.victims) > 0 {
		m.settle(rt) // serving the victims' keys may grant requests
		return
	}
	m.compare(rt)
	if c := m.cycle(); c != "" {
		rt.Fatalf("a cycle persists among waiting owners: %s\n%s", c, m.describe())
	}
}

// queuedInTable reports whether r is queued in the table, counted, asleep.
func (m *modelRun) queuedInTable(r *mReq) bool {
	sh := m.tab.shard(m.tab.hash(0, m.key(r.key)))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.index.find(m.tab.hash(0, m.key(r.key)), 0, m.key(r.key))
	if e == nil {
		return false
	}
	for w := e.head; w != nil; w = w.next {
		if w.h == r.h || w.upgrade == r.h {
			return w.counted && !w.recheck && !w.checking && w.state == waitQueued
		}
	}
	return false
}

// compare requires the table's holders and queues to be the model's, in order and mode. A holder
// whose lease has passed counts as gone, as it is for everyone who looks.
func (m *modelRun) compare(rt *rapid.T) {
	for k := range modelKeys {
		var got, want []string
		sh := m.tab.shard(m.tab.hash(0, m.key(k)))
		sh.mu.Lock()
		if e := sh.index.find(m.tab.hash(0, m.key(k)), 0, m.key(k)); e != nil {
			var hs []string
			for _, h := range e.appendHolders(nil) {
				if h.dueAt() > m.now {
					hs = append(hs, fmt.Sprintf("%p/%v", h, h.flags()&FlagShared != 0))
				}
			}
			slices.Sort(hs)
			got = append(got, hs...)
			for w := e.head; w != nil; w = w.next {
				if w.upgrade != nil {
					got = append(got, fmt.Sprintf("up %p", w.upgrade))
				} else {
					got = append(got, fmt.Sprintf("q %p/%v", w.h, w.shared))
				}
			}
		}
		sh.mu.Unlock()
		var hs []string
		for _, h := range m.holders[k] {
			hs = append(hs, fmt.Sprintf("%p/%v", h.h, h.shared))
		}
		slices.Sort(hs)
		want = append(want, hs...)
		for _, r := range m.queues[k] {
			if r.up != nil {
				want = append(want, fmt.Sprintf("up %p", r.h))
			} else {
				want = append(want, fmt.Sprintf("q %p/%v", r.h, r.shared))
			}
		}
		if !slices.Equal(got, want) {
			rt.Fatalf("key %d: the table has %v, the model %v\n%s", k, got, want, m.describe())
		}
	}
}

// waitsFor lists the owners that owner o, queued with r, waits for (docs/DESIGN.md §15.5), by
// strict FIFO: every owner that must go or be granted before r can be. Those are the holders of
// r's key in a mode that conflicts with r; for an exclusive request or an upgrade, every request
// queued ahead of it, all of which are granted first; for a shared request, every exclusive
// request or upgrade queued ahead of it, and, when there is one, every holder, since that one
// needs them all gone. A request or hold of no owner is no step of a path, but what it waits for
// still holds up the requests behind it.
func (m *modelRun) waitsFor(r *mReq) []int {
	var out []int
	add := func(o int) {
		if o != 0 && o != r.owner && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	q := m.queues[r.key]
	at := slices.Index(q, r)
	behindExclusive := false
	for i := at - 1; i >= 0; i-- {
		if !r.shared || !q[i].shared {
			add(q[i].owner)
		}
		if !q[i].shared {
			behindExclusive = true
		}
	}
	for _, h := range m.holders[r.key] {
		if !r.shared || !h.shared || behindExclusive {
			add(h.owner)
		}
	}
	return out
}

// request returns owner o's queued request, or nil.
func (m *modelRun) request(o int) *mReq {
	for k := range modelKeys {
		for _, r := range m.queues[k] {
			if r.owner == o {
				return r
			}
		}
	}
	return nil
}

// cycle returns a cycle of waiting owners, by brute force over every path, or "".
func (m *modelRun) cycle() string {
	var path []int
	var dfs func(o int) string
	dfs = func(o int) string {
		if i := slices.Index(path, o); i >= 0 {
			var b strings.Builder
			for _, p := range path[i:] {
				fmt.Fprintf(&b, "o%d → ", p)
			}
			fmt.Fprintf(&b, "o%d", o)
			return b.String()
		}
		r := m.request(o)
		if r == nil {
			return ""
		}
		path = append(path, o)
		defer func() { path = path[:len(path)-1] }()
		for _, next := range m.waitsFor(r) {
			if c := dfs(next); c != "" {
				return c
			}
		}
		return ""
	}
	for o := 1; o <= modelOwners; o++ {
		if c := dfs(o); c != "" {
			return c
		}
	}
	return ""
}

// checkNamesCycle requires dl, the error of victim r, to name a cycle of the model's state: it
// starts with r, each step names a waiting owner and the key it waits for, and each owner waits
// for the next, the last for the first.
func (m *modelRun) checkNamesCycle(rt *rapid.T, r *mReq, dl *DeadlockError) {
	if len(dl.Cycle) == 0 || dl.Cycle[0].Owner != Owner(m.owners[r.owner]) {
		rt.Fatalf("the deadlock of %v names %v", r, dl.Cycle)
	}
	for i, w := range dl.Cycle {
		o := slices.Index(m.owners[:], w.Owner.(*modelOwner))
		q := m.request(o)
		if q == nil || string(m.key(q.key)) != string(w.Key) {
			rt.Fatalf("the deadlock of %v names o%d waiting for %q, which it does not (%s): %s", r, o, w.Key, describeCycle(dl), m.describe())
		}
		next := dl.Cycle[(i+1)%len(dl.Cycle)].Owner.(*modelOwner)
		if !slices.Contains(m.waitsFor(q), slices.Index(m.owners[:], next)) {
			rt.Fatalf("the deadlock of %v names o%d waiting for %s, which it does not (%s): %s", r, o, next.name, describeCycle(dl), m.describe())
		}
	}
}

// describeCycle prints the cycle a DeadlockError names.
func describeCycle(dl *DeadlockError) string {
	var parts []string
	for _, w := range dl.Cycle {
		parts = append(parts, fmt.Sprintf("%s waits for %s", w.Owner.Name(), w.Key))
	}
	return strings.Join(parts, " → ")
}

// The model's graph check holds the engine to strict FIFO past a request of no owner
// (docs/DESIGN.md §13), replayed through the model's own steps: k1 is held exclusively by o1 with
// o2's exclusive request and then o3's shared one queued; k0 is held shared by o3 with o4's
// exclusive request, a request of no owner (exclusive) and o1's shared one queued. o1's request
// cannot be granted before o4's, nor before o3 lets k0 go, so o3's request closes
// o3 → o1 → o4 → o3 and fails then. With o1's edge ending at the request of no owner, the cycle
// would persist until that request timed out, and the model names it.
func TestModelCatchesCycleBehindRequestOfNoOwner(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := newModelRun(t, rt)
		defer m.finish(rt)
		const lease, timeout = time.Second, time.Second
		m.lock(rt, 1, 1, false, true, lease, timeout)
		m.lock(rt, 3, 0, true, true, lease, timeout)
		m.lock(rt, 4, 0, false, true, lease, timeout)
		outside := m.lock(rt, 0, 0, false, true, lease, timeout)
		m.lock(rt, 1, 0, true, true, lease, timeout)
		m.lock(rt, 2, 1, false, true, lease, timeout)
		m.lock(rt, 3, 1, true, true, lease, timeout) // settle fails here if o1's edge ends at the outside request
		if m.deadlocks != 1 {
			rt.Fatalf("%d deadlocks reported, not the one o3's request closes: %s", m.deadlocks, m.describe())
		}
		m.cancel(rt, outside)
		if m.deadlocks != 1 {
			rt.Fatalf("%d deadlocks reported after the outside request left: %s", m.deadlocks, m.describe())
		}
	})
}
