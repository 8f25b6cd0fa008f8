package locktable

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The model check: rapid drives a table through random sequences of lock, try, release, revoke,
// upgrade, cancel and clock steps (lapses and timeouts), shared and exclusive, by owners and by
// requests of no owner, on a few keys. After every step the table is compared with the model
// below, which keeps the rules of docs/DESIGN.md §15 in the plainest form: per key a list of
// holders and a FIFO queue, served from its head. The comparison covers who holds each key in
// which mode, the order and kind of every queue (so who is granted next), and how every request
// that returned ended. The wait-for graph is then brute-forced from the whole state: no cycle may
// persist among waiting owners, and every DeadlockError must name a cycle that was real.
//
// Every request waits in a goroutine of its own; a step is over once each of them has returned or
// is queued with its deadlock check done. Leases and timeouts end a few nanoseconds apart, so
// that no two deadlines coincide and the clock steps exactly onto each.

// modelSteps counts the steps every run of the model check took, for its log.
var modelSteps, modelDeadlocks atomic.Int64

func TestModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) { newModelRun(t, rt).run(rt) })
	t.Logf("%d steps, %d deadlocks reported", modelSteps.Load(), modelDeadlocks.Load())
}

const (
	modelKeys   = 2
	modelOwners = 4 // owners 1..4; 0 is a request of no owner
)

// modelOwner is an owner of the check, named o1, o2, o3.
type modelOwner struct{ name string }

func (o *modelOwner) Name() string { return o.name }

// mHold is a holder in the model.
type mHold struct {
	id       int
	owner    int
	key      int
	shared   bool
	deadline time.Duration
	h        *Hold
}

// mReq is a queued request in the model: a lock, or the upgrade of up.
type mReq struct {
	id       int
	owner    int
	key      int
	shared   bool
	up       *mHold
	lease    time.Duration
	deadline time.Duration // when it times out
	h        *Hold         // the lock's hold; for an upgrade, up.h
	cancel   context.CancelFunc
	done     chan error
	returned bool // done was read
}

// result reads how r's call returned.
func (r *mReq) result() error {
	r.returned = true
	return <-r.done
}

func (r *mReq) String() string {
	kind := "x"
	switch {
	case r.up != nil:
		kind = "up"
	case r.shared:
		kind = "s"
	}
	return fmt.Sprintf("r%d(o%d %s k%d)", r.id, r.owner, kind, r.key)
}

// modelRun is one sequence: the table, its clock and tenant, and the model.
type modelRun struct {
	t      *testing.T
	tab    *Table
	clk    *ManualClock
	l      *testLocker
	owners [modelOwners + 1]*modelOwner

	now     time.Duration // the model's Mono
	seq     int           // ids of holds and requests
	holders [modelKeys][]*mHold
	queues  [modelKeys][]*mReq
	// ended are the requests the model ended in this step, with how each must have ended: nil
	// for a grant, else the error.
	ended map[*mReq]error
	// victims are the requests the table failed with a DeadlockError in this step; deadlocks
	// counts them over the run.
	victims   []*mReq
	deadlocks int
}

func newModelRun(t *testing.T, rt *rapid.T) *modelRun {
	m := &modelRun{t: t, tab: New("model", &Stamps{}), clk: NewManualClock(time.Unix(1, 0)), ended: map[*mReq]error{}}
	m.l = openTestLocker(m.tab, m.clk, slog.New(slog.DiscardHandler))
	for i := 1; i <= modelOwners; i++ {
		m.owners[i] = &modelOwner{name: fmt.Sprintf("o%d", i)}
	}
	return m
}

func (m *modelRun) key(k int) []byte { return []byte{'k', byte('0' + k)} }

// spread is under 17 ms, pseudo-random, to make each deadline unique: sums of these rarely meet.
func (m *modelRun) spread() time.Duration {
	m.seq++
	return time.Duration(uint64(m.seq)*0x9e3779b97f4a7c15>>40) + 1
}

func (m *modelRun) run(rt *rapid.T) {
	defer m.finish(rt)
	rt.Repeat(map[string]func(*rapid.T){
		// Locks are drawn three times as often as each other step, so that queues grow.
		"lock":    m.stepLock,
		"lock2":   m.stepLock,
		"lock3":   m.stepLock,
		"release": func(rt *rapid.T) { m.stepEnd(rt, false) },
		"revoke":  func(rt *rapid.T) { m.stepEnd(rt, true) },
		"cancel":  m.stepCancel,
		"advance": m.stepAdvance,
		"":        m.check,
	})
}

// finish releases everything and cancels every request, leaving the table empty.
func (m *modelRun) finish(rt *rapid.T) {
	for k := range modelKeys {
		for _, r := range m.queues[k] {
			r.cancel()
			if !r.returned {
				r.result()
			}
		}
		for _, h := range m.holders[k] {
			h.h.Release()
		}
	}
	m.l.Close()
	if !m.tab.Empty() || m.tab.Deadlines() != 0 {
		rt.Fatalf("the table is not empty once everything was released")
	}
}

// waiting reports whether owner o has a request queued.
func (m *modelRun) waiting(o int) bool {
	for k := range modelKeys {
		for _, r := range m.queues[k] {
			if r.owner == o {
				return true
			}
		}
	}
	return false
}

// heldBy returns the model's hold of owner o on key k, or nil.
func (m *modelRun) heldBy(o, k int) *mHold {
	for _, h := range m.holders[k] {
		if o != 0 && h.owner == o {
			return h
		}
	}
	return nil
}

func (m *modelRun) heldExclusively(k int) bool {
	return len(m.holders[k]) == 1 && !m.holders[k][0].shared
}

// stepLock is a lock request (Lock or TryLock), or by an owner that holds the key shared an
// exclusive request, which upgrades its hold.
func (m *modelRun) stepLock(rt *rapid.T) {
	o := rapid.IntRange(0, modelOwners).Draw(rt, "owner")
	k := rapid.IntRange(0, modelKeys-1).Draw(rt, "key")
	shared := rapid.Bool().Draw(rt, "shared")
	wait := rapid.IntRange(0, 5).Draw(rt, "try") > 0 // a TryLock one time in six
	lease := time.Duration(rapid.SampledFrom([]int{20, 50, 100}).Draw(rt, "lease"))*time.Millisecond + m.spread()
	timeout := time.Duration(rapid.SampledFrom([]int{30, 70}).Draw(rt, "timeout"))*time.Millisecond + m.spread()
	if o != 0 && m.waiting(o) {
		rt.Skip("an owner waits for one key at a time")
	}
	if held := m.heldBy(o, k); held != nil && (shared || !held.shared || !wait) {
		rt.Skip("a re-entrant request does not reach the table")
	}
	m.lock(rt, o, k, shared, wait, lease, timeout)
}

// lock is a lock request of owner o (0: none) for key k, or by an owner that holds the key
// shared an exclusive request, which upgrades its hold; it returns the request.
func (m *modelRun) lock(rt *rapid.T, o, k int, shared, wait bool, lease, timeout time.Duration) *mReq {
	var owner Owner
	if o != 0 {
		owner = m.owners[o]
	}
	if held := m.heldBy(o, k); held != nil {
		return m.upgrade(rt, held, timeout)
	}
	h := m.l.newHold(m.key(k), Options{Shared: shared}, owner)
	h.SetAskedLease(lease)
	m.seq++
	r := &mReq{id: m.seq, owner: o, key: k, shared: shared, lease: lease, deadline: m.now + timeout, h: h}
	admitted := m.admits(k, shared)
	if !wait {
		_, err := h.Acquire(context.Background(), lease, timeout, false, false)
		switch {
		case admitted && err == nil:
			m.grant(r)
		case !admitted && err == ErrLocked:
		default:
			rt.Fatalf("TryLock of %v: got %v, the model admits it: %v", r, err, admitted)
		}
		m.settle(rt)
		return r
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() {
		_, err := h.Acquire(ctx, lease, timeout, true, false)
		r.done <- err
	}()
	if admitted {
		m.grant(r)
		m.ended[r] = nil
	} else {
		m.queues[k] = append(m.queues[k], r)
	}
	m.settle(rt)
	return r
}

// upgrade asks to make held, a shared hold of its owner, exclusive.
func (m *modelRun) upgrade(rt *rapid.T, held *mHold, timeout time.Duration) *mReq {
	m.seq++
	r := &mReq{id: m.seq, owner: held.owner, key: held.key, up: held, deadline: m.now + timeout, h: held.h}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() { r.done <- held.h.Upgrade(ctx, timeout) }()
	k := held.key
	if len(m.holders[k]) == 1 {
		held.shared = false
		m.ended[r] = nil
	} else {
		at := 0
		for at < len(m.queues[k]) && m.queues[k][at].up != nil {
			at++
		}
		m.queues[k] = slices.Insert(m.queues[k], at, r)
	}
	m.settle(rt)
	return r
}

// admits is the grant rule for a newcomer (docs/DESIGN.md §15.2), on a settled table.
func (m *modelRun) admits(k int, shared bool) bool {
	if shared {
		return len(m.queues[k]) == 0 && (len(m.holders[k]) == 0 || m.holders[k][0].shared)
	}
	return len(m.holders[k]) == 0 && len(m.queues[k]) == 0
}

// grant makes r, a lock request, a holder of its key now.
func (m *modelRun) grant(r *mReq) {
	m.holders[r.key] = append(m.holders[r.key], &mHold{id: r.id, owner: r.owner, key: r.key, shared: r.shared, deadline: m.now + r.lease, h: r.h})
}

// serve grants what the head of key k's queue can have now.
func (m *modelRun) serve(k int) {
	for len(m.queues[k]) > 0 {
		r := m.queues[k][0]
		switch {
		case r.up != nil:
			if len(m.holders[k]) != 1 {
				return
			}
			r.up.shared = false
		case r.shared:
			if m.heldExclusively(k) {
				return
			}
			m.grant(r)
		default:
			if len(m.holders[k]) > 0 {
				return
			}
			m.grant(r)
		}
		m.queues[k] = m.queues[k][1:]
		m.ended[r] = nil
	}
}

// dequeue takes r out of its queue, ended with err, and serves the key.
func (m *modelRun) dequeue(r *mReq, err error) {
	m.queues[r.key] = slices.DeleteFunc(m.queues[r.key], func(x *mReq) bool { return x == r })
	m.ended[r] = err
	m.serve(r.key)
}

// drop ends hold h (released, revoked or lapsed: expired), fails its upgrade if one waits, and
// serves the key.
func (m *modelRun) drop(h *mHold, expired bool) {
	m.holders[h.key] = slices.DeleteFunc(m.holders[h.key], func(x *mHold) bool { return x == h })
	for _, r := range m.queues[h.key] {
		if r.up == h {
			err := ErrReleased
			if expired {
				err = ErrLeaseExpired
			}
			m.queues[h.key] = slices.DeleteFunc(m.queues[h.key], func(x *mReq) bool { return x == r })
			m.ended[r] = err
			break
		}
	}
	m.serve(h.key)
}

// live lists every hold of the model.
func (m *modelRun) live() []*mHold {
	var hs []*mHold
	for k := range modelKeys {
		hs = append(hs, m.holders[k]...)
	}
	return hs
}

// stepEnd releases or revokes a holder.
func (m *modelRun) stepEnd(rt *rapid.T, revoke bool) {
	hs := m.live()
	if len(hs) == 0 {
		rt.Skip("nothing is held")
	}
	h := rapid.SampledFrom(hs).Draw(rt, "holder")
	if revoke {
		h.h.Revoke()
	} else if !h.h.Release() {
		rt.Fatalf("Release of a live hold (lease ends at %v, now %v) returned false", h.deadline, m.now)
	}
	m.drop(h, revoke)
	m.settle(rt)
}

// stepCancel cancels the ctx of a queued request.
func (m *modelRun) stepCancel(rt *rapid.T) {
	var rs []*mReq
	for k := range modelKeys {
		rs = append(rs, m.queues[k]...)
	}
	if len(rs) == 0 {
		rt.Skip("nothing is queued")
	}
	m.cancel(rt, rapid.SampledFrom(rs).Draw(rt, "request"))
}

// cancel cancels the ctx of r, a queued request.
func (m *modelRun) cancel(rt *rapid.T, r *mReq) {
	r.cancel()
	m.dequeue(r, context.Canceled)
	m.settle(rt)
}

// stepAdvance moves the clock by up to d, and onto the next deadline (a lease's end or a wait's
// timeout) if that comes first, which then ends.
func (m *modelRun) stepAdvance(rt *rapid.T) {
	d := time.Duration(rapid.SampledFrom([]int{1, 10, 40}).Draw(rt, "advance")) * time.Millisecond
	next, nextHold, nextReq := m.now+d, (*mHold)(nil), (*mReq)(nil)
	for _, h := range m.live() {
		if h.deadline <= next {
			next, nextHold, nextReq = h.deadline, h, nil
		}
	}
	for k := range modelKeys {
		for _, r := range m.queues[k] {
			if r.deadline <= next {
				next, nextHold, nextReq = r.deadline, nil, r
			}
		}
	}
	ties := 0
	for _, h := range m.live() {
		if h.deadline == next {
			ties++
		}
	}
	for k := range modelKeys {
		for _, r := range m.queues[k] {
			if r.deadline == next {
				ties++
			}
		}
	}
	if ties > 1 {
		rt.Skip("two deadlines meet")
	}
	m.clk.Advance(next - m.now)
	m.now = next
	switch {
	case nextHold != nil:
		m.drop(nextHold, true)
	case nextReq != nil:
		m.dequeue(nextReq, ErrTimeout)
	}
	m.settle(rt)
}

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

// waitsFor lists the owners that owner o, queued with r, waits for (docs/DESIGN.md §15.5): the
// holders of r's key in a mode that conflicts with r; for an exclusive request or an upgrade,
// every request queued ahead of it, all of which are granted first; for a shared request, the
// nearest exclusive request or upgrade queued ahead of it, which waits for the rest. A request or
// hold of no owner ends a path: a lease or a timeout ends its wait.
func (m *modelRun) waitsFor(r *mReq) []int {
	var out []int
	add := func(o int) {
		if o != 0 && o != r.owner && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	for _, h := range m.holders[r.key] {
		if !r.shared || !h.shared {
			add(h.owner)
		}
	}
	q := m.queues[r.key]
	at := slices.Index(q, r)
	for i := at - 1; i >= 0; i-- {
		if !r.shared {
			add(q[i].owner)
		} else if !q[i].shared {
			add(q[i].owner)
			break
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

// check is rapid's invariant hook; the comparison runs after every step already.
func (m *modelRun) check(*rapid.T) {}

// describe prints the model's state.
func (m *modelRun) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "now %v\n", m.now)
	for k := range modelKeys {
		fmt.Fprintf(&b, "k%d held by", k)
		for _, h := range m.holders[k] {
			mode := "x"
			if h.shared {
				mode = "s"
			}
			fmt.Fprintf(&b, " o%d/%s(until %v)", h.owner, mode, h.deadline)
		}
		fmt.Fprintf(&b, "; queued %v\n", m.queues[k])
	}
	return b.String()
}

// describeCycle prints the cycle a DeadlockError names.
func describeCycle(dl *DeadlockError) string {
	var parts []string
	for _, w := range dl.Cycle {
		parts = append(parts, fmt.Sprintf("%s waits for %s", w.Owner.Name(), w.Key))
	}
	return strings.Join(parts, " → ")
}

// The model's graph check catches the deadlock that a shared request's moved edge closes
// (docs/DESIGN.md §13), replayed through the model's own steps: k1 is held exclusively by o1 with
// o2's exclusive request and then o3's shared one queued; k0 is held shared by o3 with o4's
// exclusive request, a request of no owner (exclusive) and o1's shared one queued. o1's edge goes
// to the request of no owner, which ends the path. When that request is cancelled, o1's edge moves
// to o4 and closes o1 → o4 → o3 → o1 (and o1 → o4 → o3 → o2 → o1): without the recheck of a moved
// edge, the cycle persists and the model names it.
func TestModelCatchesCycleOfMovedEdge(t *testing.T) {
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
		m.lock(rt, 3, 1, true, true, lease, timeout) // no cycle: o1's edge ends at the outside request
		m.cancel(rt, outside)                        // settle fails here if the moved edge is not checked
		if m.deadlocks != 1 {
			rt.Fatalf("%d deadlocks reported, not the one of o1's moved edge: %s", m.deadlocks, m.describe())
		}
	})
}
