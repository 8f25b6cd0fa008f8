package locktable

import (
	"context"
	"flag"
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

// modelSteps and modelDeadlocks count the steps TestModel took and the deadlocks the table
// reported in them, for its log.
var modelSteps, modelDeadlocks atomic.Int64

// modelChecks and modelStepsEach are how many sequences, of up to how many steps, TestModel runs
// unless -rapid.checks or -rapid.steps say otherwise: more than rapid's defaults, whose short
// sequences seldom queue enough requests to close a cycle.
const modelChecks, modelStepsEach = "200", "100"

func TestModel(t *testing.T) {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, v := range map[string]string{"rapid.checks": modelChecks, "rapid.steps": modelStepsEach} {
		if !set[name] {
			if err := flag.Set(name, v); err != nil {
				t.Fatal(err)
			}
			defer flag.Set(name, flag.Lookup(name).DefValue)
		}
	}
	modelSteps.Store(0)
	modelDeadlocks.Store(0)
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
	h := m.l.newHold(m.key(k), testOptions{Shared: shared}, owner)
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
