package locktable

import (
	"fmt"
	"slices"
	"strings"

	"pgregory.net/rapid"
)

// The model check's wait-for graph, brute-forced from the whole state after every step
// (docs/DESIGN.md §13, §15.5, §17): no cycle may persist among waiting owners. waitsOn is the rule
// of the whole state; waitsFor, the strict-FIFO rule of keys alone, must find a cycle exactly when
// it does wherever no range is involved.

// waitsOn lists the owners whose locks must go before r, owner o's queued request, can be
// granted: the owner of every holder that conflicts with r, and of every request queued ahead of
// r that conflicts with it, and, through each such request, everything that request waits on in
// turn, since it is served before r, but for the requests r passes (model_rules_test.go). A holder
// of no owner ends a path (its lease or a timeout settles it); a request of no owner passes its
// waits on. o itself is listed when r waits through another request on one of o's own locks, or
// on r itself, ahead of a request of no owner in its key's queue where a pass that ended placed it
// (docs/DESIGN.md §17.3).
func (m *modelRun) waitsOn(r *mReq) []int {
	var out []int
	seen := map[*mReq]bool{}
	var visit func(q *mReq)
	visit = func(q *mReq) {
		for _, h := range m.holds {
			if q.blockedBy(h) && h.owner != 0 && !slices.Contains(out, h.owner) {
				out = append(out, h.owner)
			}
		}
		for _, p := range m.queue {
			if p == q || !m.aheadOf(p, q) || !q.behind(p) || !sameKey(p, q) && m.passes(q, p) || seen[p] {
				continue
			}
			seen[p] = true
			if p.owner != 0 && !slices.Contains(out, p.owner) {
				out = append(out, p.owner)
			}
			visit(p)
		}
	}
	visit(r)
	return out
}

// waitsFor lists the owners that owner o, queued with r for a key, waits for by strict FIFO, the
// rule of keys alone (docs/DESIGN.md §15.5): every owner that must go or be granted before r can
// be. Those are the holders of r's key in a mode that conflicts with r; for an exclusive request
// or an upgrade, every request queued ahead of it, all of which are granted first; for a shared
// request, every exclusive request or upgrade queued ahead of it, and, when there is one, every
// holder, since that one needs them all gone. A request or claim of no owner is no step of a path,
// but what it waits for still holds up the requests behind it.
func (m *modelRun) waitsFor(r *mReq) []int {
	var out []int
	add := func(o int) {
		if o != 0 && o != r.owner && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	q := m.keyQueue(r.target)
	at := slices.Index(q, r)
	behindExclusive := false
	for i := at - 1; i >= 0; i-- {
		if r.exclusive() || q[i].exclusive() {
			add(q[i].owner)
		}
		if q[i].exclusive() {
			behindExclusive = true
		}
	}
	for _, h := range m.keyHolders(r.target) {
		if r.exclusive() || !h.shared || behindExclusive {
			add(h.owner)
		}
	}
	return out
}

// waits is the rule that decides whom a waiting request waits for: strict FIFO where no range is
// involved, the whole state's conflicts otherwise.
func (m *modelRun) waits(r *mReq) []int {
	if m.rangesInvolved() {
		return m.waitsOn(r)
	}
	return m.waitsFor(r)
}

// checkGraph fails if a cycle persists among waiting owners; where no range is involved both
// rules must agree on whether there is one.
func (m *modelRun) checkGraph(rt *rapid.T) {
	c := m.cycle(m.waitsOn)
	if !m.rangesInvolved() {
		if fifo := m.cycle(m.waitsFor); (fifo == "") != (c == "") {
			rt.Fatalf("the rules disagree: conflicts find the cycle %q, strict FIFO %q\n%s", c, fifo, m.describe())
		}
	}
	if c != "" {
		rt.Fatalf("no cycle may persist among waiting Txns, and one does: %s\n%s", c, m.describe())
	}
}

// cycle returns a cycle of waiting owners along the edges waits lists, by brute force over every
// path, or "".
func (m *modelRun) cycle(waits func(*mReq) []int) string {
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
		for _, next := range waits(r) {
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

// describeCycle prints the cycle a DeadlockError names.
func describeCycle(dl *DeadlockError) string {
	var parts []string
	for _, w := range dl.Cycle {
		parts = append(parts, fmt.Sprintf("%s waits for %q", w.Owner.Name(), w.Key))
	}
	return strings.Join(parts, " → ")
}
