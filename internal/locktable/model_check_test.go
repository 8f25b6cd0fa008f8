package locktable

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"pgregory.net/rapid"
)

// The model check's comparison of the table with the model after every step (model_test.go drives
// the steps; model_graph_test.go brute-forces the wait-for graph).

// settle waits for every request to return or be queued with its deadlock check done, matches
// how each that returned ended with the model, takes the deadlock victims out of the model,
// compares the table with the model and brute-forces the wait-for graph.
func (m *modelRun) settle(rt *rapid.T) {
	modelSteps.Add(1)
	m.clk.Advance(0) // a deadline armed already passed falls due now, as on the real clock
	deadline := time.Now().Add(10 * time.Second)
	for {
		var pending []*mReq
		for _, r := range m.queue {
			if !m.queuedInTable(r) && !r.hasReturned() {
				pending = append(pending, r)
			}
		}
		for r := range m.ended {
			if !r.hasReturned() {
				pending = append(pending, r)
			}
		}
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			rt.Fatalf("the table did not settle: %v neither returned nor sleeps queued: %s", pending, m.describe())
		}
		time.Sleep(20 * time.Microsecond)
	}
	// Requests the model ended must have ended so.
	for r, want := range m.ended {
		got := r.result()
		if !errors.Is(got, want) && !(want == nil && got == nil) {
			rt.Fatalf("%v ended with %v, the model says %v\n%s", r, got, want, m.describe())
		}
	}
	clear(m.ended)
	// Requests the model still queues may have failed only as deadlock victims. A victim need not
	// be the newest request (a wait checked again can close the cycle, and which of the waits
	// checked finds it first is up to the goroutines), its leaving can close another cycle
	// (takeVictims), and it can grant requests behind it: those are matched once the model has
	// taken the victims out and served them.
	m.victims = m.victims[:0]
	var early []*mReq
	for _, r := range m.queue {
		if !r.hasReturned() {
			continue
		}
		if !errors.As(r.result(), new(*DeadlockError)) {
			early = append(early, r)
			continue
		}
		m.victims = append(m.victims, r)
	}
	if len(m.victims) == 0 && len(early) > 0 {
		rt.Fatalf("%v ended with %v while the model queues it: %s", early[0], early[0].result(), m.describe())
	}
	if len(m.victims) > 0 {
		m.takeVictims(rt)
		modelDeadlocks.Add(int64(len(m.victims)))
		m.deadlocks += len(m.victims)
		m.settle(rt) // serving the victims' locks may grant requests
		return
	}
	m.compare(rt)
	m.checkGraph(rt)
}

// queuedInTable reports whether r is queued in the table, counted, asleep.
func (m *modelRun) queuedInTable(r *mReq) bool {
	if r.target >= modelKeys {
		return m.rangeQueuedInTable(r)
	}
	key, cf := modelKey(r.target), cfOf(r.target)
	hash := m.tab.placed(cf, key)
	sh := m.tab.shard(hash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.index.find(hash, cf, key)
	if e == nil {
		return false
	}
	for w := e.head; w != nil; w = w.next {
		if w.h == r.h || w.upgrade == r.h {
			return asleep(w)
		}
	}
	return false
}

// asleep reports whether w is queued, counted, asleep: its deadlock check done.
func asleep(w *waiter) bool {
	return w.counted && !w.recheck && !w.checking && w.state == waitQueued
}

// holderName and queuedName print a holder and a queued request as compare matches them: by
// handle and mode, the upgrade of a claim by the claim.
func holderName(h *Claim, shared bool) string { return fmt.Sprintf("%p/%v", h, shared) }

func queuedName(h *Claim, upgrade, shared bool) string {
	if upgrade {
		return fmt.Sprintf("up %p", h)
	}
	return fmt.Sprintf("q %p/%v", h, shared)
}

// waiterName is queuedName of the table's request w.
func waiterName(w *waiter) string {
	if w.upgrade != nil {
		return queuedName(w.upgrade, true, false)
	}
	return queuedName(w.h, false, w.shared)
}

// name is queuedName of the model's request r.
func (r *mReq) name() string { return queuedName(r.h, r.up != nil, r.shared) }

// compare requires the table's holders and queues to be the model's, in order and mode. A holder
// whose lease has passed counts as gone, as it is for everyone who looks.
func (m *modelRun) compare(rt *rapid.T) {
	for k := range modelKeys {
		var got, want []string
		key, cf := modelKey(k), cfOf(k)
		hash := m.tab.placed(cf, key)
		sh := m.tab.shard(hash)
		sh.mu.Lock()
		if e := sh.index.find(hash, cf, key); e != nil {
			var hs []string
			for _, h := range e.appendHolders(nil) {
				if h.dueAt() > m.now {
					hs = append(hs, holderName(h, h.flags()&flagShared != 0))
				}
			}
			slices.Sort(hs)
			got = append(got, hs...)
			for w := e.head; w != nil; w = w.next {
				got = append(got, waiterName(w))
			}
		}
		sh.mu.Unlock()
		var hs []string
		for _, h := range m.keyHolders(k) {
			hs = append(hs, holderName(h.h, h.shared))
		}
		slices.Sort(hs)
		want = append(want, hs...)
		for _, r := range m.keyQueue(k) {
			want = append(want, r.name())
		}
		if !slices.Equal(got, want) {
			rt.Fatalf("key %s: the table has %v, the model %v\n%s", key, got, want, m.describe())
		}
	}
	m.compareRanges(rt)
}

// takeVictims takes m.victims out of the model, each named by its DeadlockError, in an order in
// which each names a cycle of the state that those before it left. One victim's leaving can end
// the passes of the requests that passed others through its wait, and their new edges can close
// a cycle that was not there before it left (docs/DESIGN.md §17.3): the table checks those waits
// again once the victim is gone and fails the next victim then, and the model serves the queue
// after each victim as the table does. It fails if no order of the victims does so.
func (m *modelRun) takeVictims(rt *rapid.T) {
	first := ""
	var take func(left []*mReq) bool
	take = func(left []*mReq) bool {
		if len(left) == 0 {
			return true
		}
		for i, r := range left {
			var dl *DeadlockError
			errors.As(r.result(), &dl)
			if why := m.namesCycle(r, dl); why != "" {
				if first == "" {
					first = why
				}
				continue
			}
			s := m.save()
			m.dequeue(rt, r, nil)
			delete(m.ended, r)
			if take(slices.Delete(slices.Clone(left), i, i+1)) {
				return true
			}
			m.restore(s)
		}
		return false
	}
	if !take(m.victims) {
		rt.Fatalf("%s", first)
	}
}

// modelState is what serving the queue changes in the model, saved to try another order of
// taking victims out (takeVictims).
type modelState struct {
	holds  []*mHold
	shared []bool // of each of holds: an upgrade granted makes its claim exclusive
	queue  []*mReq
	ended  map[*mReq]error
}

func (m *modelRun) save() modelState {
	s := modelState{holds: slices.Clone(m.holds), queue: slices.Clone(m.queue), ended: maps.Clone(m.ended)}
	for _, h := range m.holds {
		s.shared = append(s.shared, h.shared)
	}
	return s
}

func (m *modelRun) restore(s modelState) {
	m.holds, m.queue, m.ended = s.holds, s.queue, s.ended
	for i, h := range m.holds {
		h.shared = s.shared[i]
	}
}

// namesCycle returns why dl, the error of victim r, does not name a cycle of the model's state,
// or "": the cycle starts with r, each step names a waiting owner and the key or range start it
// waits for, and each owner waits for the next, the last for the first.
func (m *modelRun) namesCycle(r *mReq, dl *DeadlockError) string {
	if len(dl.Cycle) == 0 || dl.Cycle[0].Owner != Owner(m.owners[r.owner]) {
		return fmt.Sprintf("the deadlock of %v names %v", r, dl.Cycle)
	}
	for i, w := range dl.Cycle {
		o := slices.Index(m.owners[:], w.Owner.(*modelOwner))
		q := m.request(o)
		if q == nil || !bytes.Equal(spanOf(q.target).start, w.Key) {
			return fmt.Sprintf("the deadlock of %v names o%d waiting for %q, which it does not (%s): %s", r, o, w.Key, describeCycle(dl), m.describe())
		}
		next := dl.Cycle[(i+1)%len(dl.Cycle)].Owner.(*modelOwner)
		if !slices.Contains(m.waits(q), slices.Index(m.owners[:], next)) {
			return fmt.Sprintf("the deadlock of %v names o%d waiting for %s, which it does not (%s): %s", r, o, next.name, describeCycle(dl), m.describe())
		}
	}
	return ""
}
