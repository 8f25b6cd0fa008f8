package locktable

import (
	"context"
	"slices"
	"time"

	"pgregory.net/rapid"
)

// The model check's steps (model_test.go): each calls the table and applies the same step to the
// model, whose rules (model_rules_test.go) say how every request ends; settle then compares.

// waiting reports whether owner o has a request queued.
func (m *modelRun) waiting(o int) bool { return m.request(o) != nil }

// request returns owner o's queued request, or nil.
func (m *modelRun) request(o int) *mReq {
	for _, r := range m.queue {
		if r.owner == o {
			return r
		}
	}
	return nil
}

// heldBy returns the model's claim of owner o (not 0) on exactly target t, or nil.
func (m *modelRun) heldBy(o, t int) *mHold {
	for _, h := range m.holds {
		if o != 0 && h.owner == o && h.target == t {
			return h
		}
	}
	return nil
}

// holdOf returns the model's claim that r was granted, or nil.
func (m *modelRun) holdOf(r *mReq) *mHold {
	for _, h := range m.holds {
		if h.id == r.id {
			return h
		}
	}
	return nil
}

// coveredBy returns a range claim of owner o (not 0) that contains key t in a mode at least as
// strong as asked (shared or not), or nil: a Txn's Lock of such a key returns that claim and does
// not reach the table.
func (m *modelRun) coveredBy(o, t int, shared bool) *mHold {
	for _, h := range m.holds {
		if o != 0 && h.owner == o && h.target >= modelKeys && (shared || !h.shared) && cfOf(t) == 0 && spanOf(h.target).meets(spanOf(t)) {
			return h
		}
	}
	return nil
}

// stepLock is a lock request (Lock or TryLock) of a key or a range, or by an owner that holds that
// key or range shared an exclusive request, which upgrades its claim.
func (m *modelRun) stepLock(rt *rapid.T) {
	o := rapid.IntRange(0, modelOwners).Draw(rt, "owner")
	t := rapid.IntRange(0, modelTargets-1).Draw(rt, "target")
	shared := rapid.Bool().Draw(rt, "shared")
	wait := rapid.IntRange(0, 5).Draw(rt, "try") > 0 // a TryLock one time in six
	lease := time.Duration(rapid.SampledFrom([]int{20, 50, 100}).Draw(rt, "lease"))*time.Millisecond + m.spread()
	timeout := time.Duration(rapid.SampledFrom([]int{30, 70}).Draw(rt, "timeout"))*time.Millisecond + m.spread()
	if o != 0 && m.waiting(o) {
		rt.Skip("an owner waits for one lock at a time")
	}
	if held := m.heldBy(o, t); held != nil && (shared || !held.shared || !wait) {
		rt.Skip("a re-entrant request does not reach the table")
	}
	if t < modelKeys && m.coveredBy(o, t, shared) != nil {
		rt.Skip("a key inside a range the owner holds strongly enough does not reach the table")
	}
	m.lock(rt, o, t, shared, wait, lease, timeout)
}

// newClaim returns a claim of the check's tenant for target t, marked flagOwnerHolds when holds.
func (m *modelRun) newClaim(o, t int, shared, holds bool) *Claim {
	var owner Owner
	if o != 0 {
		owner = m.owners[o]
	}
	opts := testOptions{Shared: shared, OwnerHolds: holds}
	if t < modelKeys {
		h := &Claim{}
		m.l.ten.Prepare(h, owner, cfOf(t), modelKey(t), opts.ask())
		return h
	}
	m.rangeMode = true // PrepareRange makes the column family's range space
	s := spanOf(t)
	return m.l.newRangeClaim(s.start, s.end, opts, owner)
}

// holdsAny reports whether owner o (not 0) holds a lock, as a Txn knows when it asks.
func (m *modelRun) holdsAny(o int) bool {
	return o != 0 && slices.ContainsFunc(m.holds, func(h *mHold) bool { return h.owner == o })
}

// lock is a lock request of owner o (0: none) for target t, or by an owner that holds t shared an
// exclusive request, which upgrades its claim; it returns the request.
func (m *modelRun) lock(rt *rapid.T, o, t int, shared, wait bool, lease, timeout time.Duration) *mReq {
	if held := m.heldBy(o, t); held != nil {
		return m.upgrade(rt, held, timeout)
	}
	holds := m.holdsAny(o)
	h := m.newClaim(o, t, shared, holds)
	m.seq++
	r := &mReq{id: m.seq, owner: o, target: t, shared: shared, lease: lease, deadline: m.now + timeout, h: h, holds: holds}
	admitted := m.admits(rt, r)
	if !wait {
		_, err := h.Acquire(context.Background(), lease, timeout, false, false)
		switch {
		case admitted && err == nil:
			m.grant(r)
		case !admitted && err == ErrLocked:
		default:
			rt.Fatalf("TryLock of %v: got %v, the model admits it: %v\n%s", r, err, admitted, m.describe())
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
		if at := m.passPoint(r); at >= 0 {
			m.queue = slices.Insert(m.queue, at, r)
		} else {
			m.queue = append(m.queue, r)
		}
		m.repass()
		m.serve(rt) // a new wait of an owner can let another owner's request pass (§17.2)
	}
	m.settle(rt)
	return r
}

// upgrade asks to make held, a shared claim of its owner, exclusive: at once when nothing else
// stops it, else queued ahead of every request but the upgrades already queued.
func (m *modelRun) upgrade(rt *rapid.T, held *mHold, timeout time.Duration) *mReq {
	m.seq++
	r := &mReq{id: m.seq, owner: held.owner, target: held.target, up: held, deadline: m.now + timeout, h: held.h}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() {
		_, err := held.h.Upgrade(ctx, timeout, false)
		r.done <- err
	}()
	if m.admits(rt, r) {
		held.shared = false
		m.ended[r] = nil
	} else {
		m.queue = slices.Insert(m.queue, m.upgradesQueued(), r)
		m.repass()
		m.serve(rt)
	}
	m.settle(rt)
	return r
}

// upgradesQueued counts the upgrades at the head of the queue: where the next one goes.
func (m *modelRun) upgradesQueued() int {
	at := 0
	for at < len(m.queue) && m.queue[at].up != nil {
		at++
	}
	return at
}

// stepEnd releases or revokes a holder.
func (m *modelRun) stepEnd(rt *rapid.T, revoke bool) {
	if len(m.holds) == 0 {
		rt.Skip("nothing is held")
	}
	h := rapid.SampledFrom(m.holds).Draw(rt, "holder")
	if revoke {
		h.h.Revoke()
	} else if !h.h.Release() {
		rt.Fatalf("Release of a live claim (lease ends at %v, now %v) returned false", h.deadline, m.now)
	}
	m.drop(rt, h, revoke)
	m.settle(rt)
}

// stepCancel cancels the ctx of a queued request.
func (m *modelRun) stepCancel(rt *rapid.T) {
	if len(m.queue) == 0 {
		rt.Skip("nothing is queued")
	}
	m.cancel(rt, rapid.SampledFrom(m.queue).Draw(rt, "request"))
}

// cancel cancels the ctx of r, a queued request.
func (m *modelRun) cancel(rt *rapid.T, r *mReq) {
	r.cancel()
	m.dequeue(rt, r, context.Canceled)
	m.settle(rt)
}

// stepAdvance moves the clock by up to d, and onto the next deadline (a lease's end or a wait's
// timeout) if that comes first, which then ends.
func (m *modelRun) stepAdvance(rt *rapid.T) {
	m.advance(rt, time.Duration(rapid.SampledFrom([]int{1, 10, 40}).Draw(rt, "advance"))*time.Millisecond)
}

// advance moves the clock by up to d, and onto the next deadline if that comes first.
func (m *modelRun) advance(rt *rapid.T, d time.Duration) {
	next, nextHold, nextReq := m.now+d, (*mHold)(nil), (*mReq)(nil)
	for _, h := range m.holds {
		if h.deadline <= next {
			next, nextHold, nextReq = h.deadline, h, nil
		}
	}
	for _, r := range m.queue {
		if r.deadline <= next {
			next, nextHold, nextReq = r.deadline, nil, r
		}
	}
	ties := 0
	for _, h := range m.holds {
		if h.deadline == next {
			ties++
		}
	}
	for _, r := range m.queue {
		if r.deadline == next {
			ties++
		}
	}
	if ties > 1 {
		rt.Skip("two deadlines meet")
	}
	m.clk.Advance(next - m.now)
	m.now = next
	switch {
	case nextHold != nil:
		m.drop(rt, nextHold, true)
	case nextReq != nil:
		m.dequeue(rt, nextReq, ErrTimeout)
	}
	m.settle(rt)
}
