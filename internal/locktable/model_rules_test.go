package locktable

import (
	"bytes"
	"slices"
	"time"

	"pgregory.net/rapid"
)

// The model check's rules (docs/DESIGN.md §15.2, §15.3, §17), decided by brute force over the
// whole state: two locks conflict when their key sets meet, at least one is exclusive, and they
// are not of one owner; a request is served once no holder and no request queued ahead of it
// conflicts with it, but for the requests it passes: a request of an owner that holds locks passes
// a request that waits for one of them, itself or through the requests queued ahead of it, the
// latter only at a lock whose key (a range's start) is below the key it asks (§17.2).
// Where two requests that conflict are both free to go, the younger passing the older, either may
// be served first, and the model takes the one the table served; so too where two are each free
// only while the other waits, one passing a request through the other's wait.
// Where no range is involved, the rules of keys alone (per key a FIFO queue,
// upgrades ahead, served from its head) decide too, and the two must agree (model_test.go drives
// them).

// modelConflicts reports whether a lock of owner oa (0: none) on target ta, exclusive when xa,
// and one of owner ob on tb, exclusive when xb, conflict. Two locks of no owner are of two owners.
func modelConflicts(oa, ta int, xa bool, ob, tb int, xb bool) bool {
	if oa != 0 && oa == ob {
		return false
	}
	return (xa || xb) && cfOf(ta) == cfOf(tb) && spanOf(ta).meets(spanOf(tb))
}

// blockedBy reports whether holder h stops r: an upgrade is not stopped by the claim it upgrades.
func (r *mReq) blockedBy(h *mHold) bool {
	return h != r.up && modelConflicts(r.owner, r.target, r.exclusive(), h.owner, h.target, !h.shared)
}

// behind reports whether r must be served after q, queued ahead of it.
func (r *mReq) behind(q *mReq) bool {
	return modelConflicts(r.owner, r.target, r.exclusive(), q.owner, q.target, q.exclusive())
}

// blocked reports whether r must wait, given the requests queued ahead of it.
func (m *modelRun) blocked(r *mReq, ahead []*mReq) bool {
	for _, h := range m.holds {
		if r.blockedBy(h) {
			return true
		}
	}
	for _, q := range ahead {
		if r.behind(q) && (sameKey(r, q) || !m.passes(r, q)) {
			return true
		}
	}
	return false
}

// passes reports whether r may pass q, a request queued ahead of it: its column family is in range
// mode, r's owner held locks as it asked, and q cannot be served before that owner lets go.
func (m *modelRun) passes(r, q *mReq) bool { return m.passesBy(r, q, true) }

// passesBy is passes; with exact false, a request queued behind a conflicting one waits for it
// even where it passes that one itself (the engine's passesBy: its search looks one level down).
func (m *modelRun) passesBy(r, q *mReq, exact bool) bool {
	if !m.rangeMode || cfOf(r.target) != 0 || r.owner == 0 || !r.holds || q.owner == r.owner {
		return false
	}
	return m.waitsForOwner(q, r.owner, spanOf(r.target).start, true, exact, map[*mReq]bool{})
}

// waitsForOwner reports whether q, a queued request, cannot be served before owner o lets go: it
// conflicts with a lock of o, or with a lock of another owner whose queued request waits for o in
// turn; or a request queued ahead of it that it conflicts with, and does not pass, is o's, or waits
// for o in turn. A
// wait of an owner in another column family is not followed. Past q itself (direct false), a lock
// of o counts only if its key, a range's start, is below at, the key of the request that asks to
// pass, or is a range that starts at it (§17.2: a Txn that asks below a key it holds passes nobody
// through another's wait).
func (m *modelRun) waitsForOwner(q *mReq, o int, at []byte, direct, exact bool, seen map[*mReq]bool) bool {
	if seen[q] {
		return false
	}
	seen[q] = true
	for _, h := range m.holds {
		if h.owner == 0 || !q.blockedBy(h) {
			continue
		}
		if h.owner == o {
			c := bytes.Compare(spanOf(h.target).start, at)
			if direct || c < 0 || c == 0 && h.target >= modelKeys {
				return true
			}
			continue
		}
		if u := m.request(h.owner); u != nil && cfOf(u.target) == cfOf(q.target) && m.waitsForOwner(u, o, at, false, exact, seen) {
			return true
		}
	}
	for _, p := range m.queue {
		if p == q || !m.aheadOf(p, q) || !q.behind(p) || exact && !sameKey(p, q) && m.passesBy(q, p, false) {
			continue // q does not wait for p
		}
		if p.owner == o && direct || p.owner != o && m.waitsForOwner(p, o, at, false, exact, seen) {
			return true
		}
	}
	return false
}

// sameKey reports whether p and q are requests for one key, which its queue orders.
func sameKey(p, q *mReq) bool { return p.target == q.target && p.target < modelKeys }

// aheadOf reports whether p, a queued request, is served before q, another one, where they
// conflict: upgrades go ahead of every other request, in their order; requests for one key are in
// the order of its queue, where a request that passes others is placed ahead of them; all others
// are in the order of arrival.
func (m *modelRun) aheadOf(p, q *mReq) bool {
	switch {
	case sameKey(p, q) || p.up != nil && q.up != nil:
		return slices.Index(m.queue, p) < slices.Index(m.queue, q)
	case p.up != nil || q.up != nil:
		return p.up != nil
	}
	return p.id < q.id
}

// passPoint is where r, a newcomer's request for a key, is queued when it waits: ahead of the
// first request for its key that it passes, or -1 for the tail.
func (m *modelRun) passPoint(r *mReq) int {
	if r.up != nil || r.target >= modelKeys {
		return -1
	}
	for i, q := range m.queue {
		if sameKey(q, r) && m.passes(r, q) {
			return i
		}
	}
	return -1
}

// repass moves each queued key request of an owner that held locks as it asked ahead of the
// first request queued ahead of it for its key that it passes now, oldest first and from the
// start again after each move, each at most once: a new wait can make a request pass one it
// queued behind (§17.2).
func (m *modelRun) repass() {
	if !m.rangeMode {
		return
	}
	done := map[*mReq]bool{}
	for moved := true; moved; {
		moved = false
		byAge := slices.Clone(m.queue)
		slices.SortFunc(byAge, func(a, b *mReq) int { return a.id - b.id })
		for _, r := range byAge {
			if r.up != nil || r.target >= modelKeys || r.owner == 0 || !r.holds || done[r] {
				continue
			}
			at := slices.Index(m.queue, r)
			for i, q := range m.queue[:at] {
				if sameKey(q, r) && m.passes(r, q) {
					m.queue = slices.Insert(slices.Delete(m.queue, at, at+1), i, r)
					moved, done[r] = true, true
					break
				}
			}
			if moved {
				break
			}
		}
	}
}

// newcomerAhead lists the queued requests ahead of r, a newcomer: for an upgrade the upgrades
// queued; for a lock every request but those for its key from its pass point on.
func (m *modelRun) newcomerAhead(r *mReq) []*mReq {
	if r.up != nil {
		return slices.DeleteFunc(slices.Clone(m.queue), func(q *mReq) bool { return q.up == nil })
	}
	at := m.passPoint(r)
	var out []*mReq
	for i, q := range m.queue {
		if at < 0 || i < at || !sameKey(q, r) {
			out = append(out, q)
		}
	}
	return out
}

// admits is the grant rule for r on arrival, on a settled table: a lock queues behind every
// request but those it passes, an upgrade only behind the upgrades queued. Where no range is
// involved it must be the rule of keys alone.
func (m *modelRun) admits(rt *rapid.T, r *mReq) bool {
	ok := !m.blocked(r, m.newcomerAhead(r))
	if !m.rangesInvolved() && r.target < modelKeys && ok != m.fifoAdmits(r) {
		rt.Fatalf("the rules disagree on %v: by conflicts %v, by the key's FIFO queue %v\n%s", r, ok, !ok, m.describe())
	}
	return ok
}

// grant makes r, a lock request, a holder of its target now.
func (m *modelRun) grant(r *mReq) {
	m.holds = append(m.holds, &mHold{id: r.id, owner: r.owner, target: r.target, shared: r.shared, deadline: m.now + r.lease, h: r.h})
}

// serve grants every queued request that nothing stops now, oldest first, moving first the key
// requests that pass one queued ahead of them now (repass): a lock or a request that ended, a
// grant too, can make a request wait for an owner whose request it was ahead of (§17.2).
func (m *modelRun) serve(rt *rapid.T) {
	for {
		m.repass()
		if !m.serveOnce(rt) {
			return
		}
	}
}

// serveOnce grants every queued request that nothing stops now, oldest first, and reports
// whether it granted one. Where no range is involved, those must be the requests each key's FIFO
// queue grants from its head.
func (m *modelRun) serveOnce(rt *rapid.T) bool {
	keysOnly := !m.rangesInvolved()
	var served []*mReq
	if keysOnly {
		for k := range modelKeys {
			served = append(served, m.fifoServed(k)...)
		}
	}
	var left []*mReq
	granted := map[*mReq]bool{}
	for _, r := range m.queue {
		if m.blocked(r, m.queuedAhead(r, granted)) {
			left = append(left, r)
			continue
		}
		if s := m.rival(r, granted); s != nil && m.firstServed(r, s) == s {
			left = append(left, r) // s is served below, and r is then blocked by it
			continue
		}
		granted[r] = true
		if keysOnly && !slices.Contains(served, r) {
			rt.Fatalf("the rules disagree: conflicts grant %v, the key's FIFO queue does not\n%s", r, m.describe())
		}
		if r.up != nil {
			r.up.shared = false
		} else {
			m.grant(r)
		}
		m.ended[r] = nil
	}
	if keysOnly && len(m.queue)-len(left) != len(served) {
		rt.Fatalf("the rules disagree: the keys' FIFO queues grant %v, conflicts only %d of them\n%s", served, len(m.queue)-len(left), m.describe())
	}
	servedAny := len(m.queue) > len(left)
	m.queue = left
	return servedAny
}

// rival returns a request that nothing stops now either and that r keeps waiting, or that keeps
// r waiting, whichever is served first, or nil: one queued after r that conflicts with r and
// passes it (r waits, through the requests ahead of it, for its owner), or one that does not
// conflict with r but whose grant would stop r. Either may then be served first: the rule grants
// each once nothing it does not pass stops it, and which of the two the table reaches first is up
// to the order in which it serves its keys and ranges.
func (m *modelRun) rival(r *mReq, granted map[*mReq]bool) *mReq {
	if !m.rangeMode || r.up != nil {
		return nil
	}
	for _, s := range m.queue {
		if s == r || s.up != nil || granted[s] || !m.aheadOf(r, s) || !s.behind(r) || !m.passes(s, r) {
			continue
		}
		if !m.blocked(s, m.queuedAhead(s, granted)) {
			return s
		}
	}
	// A request that does not conflict with r but that r passes another through: each of the two
	// may be free only while the other waits (r passes q because q waits, through s's owner, for
	// r's owner; s passes through r's wait), and the one served first keeps the other waiting.
	for _, s := range m.queue {
		if s == r || s.up != nil || granted[s] || s.behind(r) || m.blocked(s, m.queuedAhead(s, granted)) {
			continue
		}
		if m.blockedOnceGranted(r, s, granted) {
			return s
		}
	}
	return nil
}

// queuedAhead lists the requests queued ahead of r that are not granted.
func (m *modelRun) queuedAhead(r *mReq, granted map[*mReq]bool) []*mReq {
	var ahead []*mReq
	for _, q := range m.queue {
		if q != r && !granted[q] && m.aheadOf(q, r) {
			ahead = append(ahead, q)
		}
	}
	return ahead
}

// blockedOnceGranted reports whether r would have to wait had s, a queued lock request, been
// granted first.
func (m *modelRun) blockedOnceGranted(r, s *mReq, granted map[*mReq]bool) bool {
	queue, holds := m.queue, m.holds
	defer func() { m.queue, m.holds = queue, holds }()
	m.queue = slices.DeleteFunc(slices.Clone(queue), func(x *mReq) bool { return x == s })
	m.holds = slices.Clone(holds)
	m.grant(s)
	return m.blocked(r, m.queuedAhead(r, granted))
}

// firstServed waits for the table to serve r or s, rivals that conflict, and returns the one it
// granted; r if it grants neither in time, which settle then reports.
func (m *modelRun) firstServed(r, s *mReq) *mReq {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Microsecond) {
		switch {
		case r.hasReturned():
			return r
		case s.hasReturned() && s.result() == nil:
			return s
		case s.hasReturned():
			return r
		}
	}
	return r
}

// dequeue takes r out of the queue, ended with err, and serves the queue.
func (m *modelRun) dequeue(rt *rapid.T, r *mReq, err error) {
	m.queue = slices.DeleteFunc(m.queue, func(x *mReq) bool { return x == r })
	m.ended[r] = err
	m.serve(rt)
}

// drop ends claim h (released, revoked or lapsed: expired), fails its upgrade if one waits, and
// serves the queue.
func (m *modelRun) drop(rt *rapid.T, h *mHold, expired bool) {
	m.holds = slices.DeleteFunc(m.holds, func(x *mHold) bool { return x == h })
	for _, r := range m.queue {
		if r.up == h {
			err := ErrReleased
			if expired {
				err = ErrLeaseExpired
			}
			m.queue = slices.DeleteFunc(m.queue, func(x *mReq) bool { return x == r })
			m.ended[r] = err
			break
		}
	}
	m.serve(rt)
}

// rangesInvolved reports whether the column family has a range space (a range was asked for
// since the run began): the table then applies the rules of §17 to every request, and the rules of
// keys alone no longer decide.
func (m *modelRun) rangesInvolved() bool { return m.rangeMode }

// keyHolders and keyQueue are key k's holders and queue, for the rules of keys alone.
func (m *modelRun) keyHolders(k int) []*mHold {
	return slices.DeleteFunc(slices.Clone(m.holds), func(h *mHold) bool { return h.target != k })
}

func (m *modelRun) keyQueue(k int) []*mReq {
	return slices.DeleteFunc(slices.Clone(m.queue), func(r *mReq) bool { return r.target != k })
}

// fifoAdmits is the rule of keys alone for a newcomer (docs/DESIGN.md §15.2): a shared request
// is granted when nothing is queued and the key is free or held shared, an exclusive one when
// the key is free and nothing is queued, an upgrade when its share is the only one.
func (m *modelRun) fifoAdmits(r *mReq) bool {
	holders, q := m.keyHolders(r.target), m.keyQueue(r.target)
	switch {
	case r.up != nil:
		return len(holders) == 1
	case r.shared:
		return len(q) == 0 && (len(holders) == 0 || holders[0].shared)
	}
	return len(holders) == 0 && len(q) == 0
}

// fifoServed lists what the head of key k's queue is granted now by the rule of keys alone: an
// upgrade whose share is the only one, every shared request up to the next exclusive one while
// the key is free or held shared, an exclusive request when the key is free.
func (m *modelRun) fifoServed(k int) []*mReq {
	holders := m.keyHolders(k)
	n, exclusive := len(holders), len(holders) == 1 && !holders[0].shared
	var out []*mReq
	for _, r := range m.keyQueue(k) {
		switch {
		case r.up != nil:
			if n != 1 {
				return out
			}
			exclusive = true
		case r.shared:
			if exclusive {
				return out
			}
			n++
		default:
			if n > 0 {
				return out
			}
			n, exclusive = 1, true
		}
		out = append(out, r)
	}
	return out
}
