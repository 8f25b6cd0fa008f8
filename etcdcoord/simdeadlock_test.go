package etcdcoord

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/recordlock/recordlock"
)

// The oracle of deadlock detection across nodes. After every step it builds the wait-for graph
// of the simulation's Txns from what the simulation knows to be true, not from what the nodes
// published:
//
//   - which Txn holds which record in which mode on which node: its handles, neither released
//     nor past their lease;
//   - which Txn's Lock is under way, for which record and mode;
//   - the order of each node's own queue: a Lock waiting in its node's table waits for what the
//     table says (recordlock.LocalWaits, as the Locker hands it to the coordinator). That is the
//     table's own ground truth, which its own model check defends; the Txn's ID, which it asks
//     by, is read from the node's coordinator or from another wait that names it.
//
// A Lock whose Txn's ID the oracle has not seen waits in its node's table, holding nothing yet,
// and so does, still, the Lock its table has just failed; the oracle reads no wait of theirs.
// Each surely waits for the Txns of its node that hold the record in a conflicting mode; it may
// wait for those that ask for it in one (queued ahead of it, or not) and, a reader, for the
// node's other readers of it while a plain writer of it is under way there (a writer queued
// ahead of a reader passes its waits on, and a plain Lock is no Txn of the graph).
//
// A Lock past its node's table (the node's local key is its, and it waits in the coordinator)
// surely waits for every Txn of another node that holds the record in a conflicting mode. It may
// also wait for a Txn of another node whose call's recall of the record is pending in etcd (its
// turn comes first: the detector follows that edge too), and for a holder whose lease lapsed
// while etcd's h/ key of its node still names it (a lapse changes no key of etcd until the
// holder's node publishes its holders again, so a confirming Txn that lands just after it
// cannot tell): those are the graph's maybe-edges. The sure edges are a subgraph of the truth,
// the sure and the maybe edges together a supergraph.
//
// The checks:
//
//	(a) No cycle of sure edges outlives its bound. doc.go's bound is the detector's look every
//	    10 ms (detectPoll) plus the requests and watch events that publish and confirm a cycle;
//	    the scheduler may hold those back for as long as it likes (a request unanswered, a reply
//	    held back, a watch held back or broken, the leader gone), and then no bound on the clock
//	    holds. So the bound is measured only over time when the cluster can make progress: a
//	    tick of the clock of at least detectPoll taken while the cluster is quiet (a leader; no
//	    request queued and no reply held back; every node's watch established, not held back and
//	    with nothing left to deliver; every node with a lease). That tick fires every detector's
//	    poll, and from there on every step of publishing and confirming the cycle is a request or
//	    an event the scheduler must answer or deliver before the cluster is quiet again. A cycle
//	    that was present through such a tick, with no fault injected since (a request failed or
//	    its reply lost, a watch broken or compacted, the leader lost: each may drop what a
//	    detector sent, which it resends only at a later look), and that is still there when the
//	    cluster is next quiet, fails the seed. Calm seeds (simMix.calm) inject no fault and
//	    now and then drain etcd to a quiet cluster and tick there (drain), so that this check
//	    gets to judge.
//	(b) No victim without a cycle. A victim is chosen when its node's confirming Txn lands in
//	    etcd: from that revision on its wait is gone, whatever else changes before the reply
//	    reaches it. So the graph judged is the one of the last check before the step that
//	    applied that Txn (the revision that deleted the victim's w/ key); nothing changes the
//	    truth between that check and the answer. Its Txn must lie on a cycle of sure and maybe
//	    edges through its Lock's wait. A Txn that its own table fails (a cycle within the node)
//	    is judged at its Lock's return, with its wait still in the graph. A confirming Txn
//	    that lands in teardown, which answers every request left and runs the clock until every
//	    wait has run out with no look of the oracle between, has no check before it: only (c)
//	    judges its victim.
//	(c) One victim per cycle: the cycle a victim's DeadlockError names never includes a Txn
//	    that was the victim of an earlier cycle (each victim rolls back, so any later cycle
//	    through it was read from stale keys).
//	(d) The victim is the one the rule names (doc.go): of the cross-node waits of the cycle its
//	    DeadlockError names, the one whose w/ key etcd wrote last, as of the confirming Txn; a
//	    wait that the Txn before it in the cycle waits for on the very record it waits for itself
//	    is passed over when another can be the victim (victimOf says why).

// simDeadlocks is the deadlock oracle's state, guarded by simWorld.mu.
type simDeadlocks struct {
	snaps   []simWaitSnap
	ages    map[string]*simCycleAge // the cycles of sure edges at the last check, by members
	victims []simVictim
	// quiet: the cluster was quiet at the last check; quietAdvance: the step since was a tick
	// of the clock from such a state; fault: the step since injected a fault
	quiet, quietAdvance, fault bool
}

// simWaitSnap is the graph at a check, with etcd's revision then.
type simWaitSnap struct {
	rev int64
	g   *simWaitGraph
}

// simCycleAge is how long a cycle has lasted: from the step it was first seen, and how many
// quiet ticks of the clock it lived through with no fault since.
type simCycleAge struct {
	since int
	clean int
}

// simVictim is a Lock that failed with ErrDeadlock: its Txn, the revision its confirming Txn
// landed at (for one of its table: etcd's revision at its return), and the Txns its error names.
type simVictim struct {
	txn     string
	rev     int64
	members []string
}

// simWaitGraph is the wait-for graph of the live Txns.
type simWaitGraph struct {
	waits map[*simTxn]simTxnLock // the Locks under way
	sure  map[*simTxn][]*simTxn  // edges that are true
	maybe map[*simTxn][]*simTxn  // edges that may be true (not among sure)
	table map[*simTxn]bool       // Locks waiting in their node's table
	names map[string]*simTxn     // every live Txn by name
	order []*simTxn              // the Txns with a Lock under way, by name
	hold  map[*simTxn][]*simHold // every live Txn's handles not released
}

func (g *simWaitGraph) add(edges map[*simTxn][]*simTxn, from, to *simTxn) {
	if !slices.Contains(edges[from], to) {
		edges[from] = append(edges[from], to)
	}
}

// waitGraphLocked builds the graph of now. A Lock that failed in its own node's table (local)
// is in it as waiting there still. Called with w.mu held.
func (w *simWorld) waitGraphLocked(local *simTxn) *simWaitGraph {
	g := &simWaitGraph{waits: map[*simTxn]simTxnLock{}, sure: map[*simTxn][]*simTxn{}, maybe: map[*simTxn][]*simTxn{},
		table: map[*simTxn]bool{}, names: map[string]*simTxn{}, hold: map[*simTxn][]*simHold{}}
	for _, t := range w.txns {
		g.names[t.name] = t
		if t.locking {
			g.waits[t] = t.plan[t.next]
			g.order = append(g.order, t)
		}
	}
	slices.SortFunc(g.order, func(a, b *simTxn) int { return strings.Compare(a.name, b.name) })
	// The waits in each node's table.
	for _, n := range w.nodes {
		n.c.mu.Lock()
		lw := n.c.localWaits
		for _, d := range n.c.delegs {
			for _, a := range d.kept {
				if t := g.names[a.txn.Name]; t != nil && t.node == n && a.txn.ID != 0 {
					t.id = a.txn.ID
				}
			}
		}
		for id, cw := range n.c.crossWaiters {
			if t := g.names[cw.name]; t != nil && t.node == n {
				t.id = id
			}
		}
		n.c.mu.Unlock()
		if lw == nil {
			continue // no Txn of n ever waited for another node: none is on a cycle across nodes
		}
		var todo []*simTxn
		for _, t := range g.order {
			if t.node == n && t.id != 0 {
				todo = append(todo, t)
			}
		}
		asked := map[*simTxn]bool{}
		for len(todo) > 0 {
			t := todo[0]
			todo = todo[1:]
			if asked[t] || t == local {
				continue
			}
			asked[t] = true
			lwt, ok := lw.WaitOf(t.id)
			if !ok {
				continue
			}
			g.table[t] = true
			for _, f := range lwt.For {
				u := g.names[f.Name]
				if u == nil || u.node != n {
					continue
				}
				if u.id == 0 {
					u.id = f.ID
				}
				g.add(g.sure, t, u)
				if _, waits := g.waits[u]; waits && !asked[u] {
					todo = append(todo, u)
				}
			}
		}
	}
	// The waits past the table, for holders and for turns. A live Txn's handle that is released
	// has lapsed (the Txn releases nothing while it lives; check lets go of lapsed handles).
	for _, t := range w.txns {
		g.hold[t] = t.holds
	}
	askers := map[simRecord]string{} // record → the node whose recall of it is pending in etcd
	for _, r := range []simRecord{{0, simKey(0)}, {0, simKey(1)}, {1, simKey(0)}, {1, simKey(1)}} {
		if kv := w.history.kvs[w.nodes[0].c.rkey(r.id())]; kv != nil {
			askers[r], _, _, _ = recallLease(string(kv.Value))
		}
	}
	for _, t := range g.order {
		l := g.waits[t]
		if g.table[t] {
			continue
		}
		// A Txn whose ID the oracle has not seen has not reached its coordinator's wait: it waits
		// in its node's table, for its own node alone, holding nothing yet; local is waiting there
		// still. For either the oracle reads no wait of the table's.
		unseen := t.id == 0 && t != local
		inTable := unseen || t == local
		for _, u := range g.order {
			ul := g.waits[u]
			if u == t || ul.rec != l.rec {
				continue
			}
			switch {
			case inTable && u.node == t.node && !(l.shared && ul.shared):
				g.add(g.maybe, t, u) // it holds the local key, or is queued for it ahead of t
			case !unseen && !g.table[u] && u.node != t.node && askers[l.rec] == u.node.name:
				g.add(g.maybe, t, u) // its call may be the asker whose turn comes first
			}
		}
		// A shared request queued in its table behind an exclusive one waits for what that one
		// waits for, the record's readers of its node too; a plain Lock is in no graph of the
		// oracle's, so the readers are the edges.
		behindWriter := inTable && l.shared && t.node.writing[l.rec] > 0
		for _, u := range w.txns {
			if u == t || unseen && u.node != t.node {
				continue
			}
			for _, h := range g.hold[u] {
				if h.rec != l.rec {
					continue
				}
				switch {
				case h.shared && l.shared:
					if behindWriter && u.node == t.node && !h.released && !h.h.IsLeaseExpired() {
						g.add(g.maybe, t, u)
					}
				case !h.released && !h.h.IsLeaseExpired():
					g.add(g.sure, t, u)
				case w.publishedHolder(u, h.rec):
					g.add(g.maybe, t, u) // lapsed, which no key of etcd says until its node publishes again
				}
			}
		}
	}
	return g
}

// publishedHolder reports whether etcd's h/ key of t's node for rec names t a holder now.
// Called with w.mu held.
func (w *simWorld) publishedHolder(t *simTxn, rec simRecord) bool {
	w.etcd.mu.Lock()
	kv := w.etcd.kvs[t.node.c.holdingKey(rec.id())]
	var value []byte
	if kv != nil {
		value = kv.Value
	}
	w.etcd.mu.Unlock()
	var h holding
	if value == nil || json.Unmarshal(value, &h) != nil {
		return false
	}
	return slices.ContainsFunc(h.Holders, func(x holderTxn) bool { return x.Name == t.name })
}

// cycles returns the cycles of sure edges, each once, by the names of their Txns.
func (g *simWaitGraph) cycles() map[string][]*simTxn {
	out := map[string][]*simTxn{}
	index := map[*simTxn]int{}
	for i, t := range g.order {
		index[t] = i
	}
	for si, s := range g.order {
		var path []*simTxn
		on := map[*simTxn]bool{}
		var walk func(v *simTxn)
		walk = func(v *simTxn) {
			path = append(path, v)
			on[v] = true
			for _, u := range g.sure[v] {
				if u == s {
					c := slices.Clone(path)
					out[cycleKey(c)] = c
					continue
				}
				if i, ok := index[u]; ok && i > si && !on[u] {
					walk(u)
				}
			}
			path = path[:len(path)-1]
			on[v] = false
		}
		walk(s)
	}
	return out
}

func cycleKey(c []*simTxn) string {
	names := make([]string, len(c))
	for i, t := range c {
		names[i] = t.name
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// onCycle reports whether t's wait lies on a cycle of sure and maybe edges.
func (g *simWaitGraph) onCycle(t *simTxn) bool {
	seen := map[*simTxn]bool{}
	stack := []*simTxn{t}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, u := range slices.Concat(g.sure[v], g.maybe[v]) {
			if u == t {
				return true
			}
			if !seen[u] {
				seen[u] = true
				stack = append(stack, u)
			}
		}
	}
	return false
}

// describeCycle names a cycle's Txns with the records they wait for.
func (g *simWaitGraph) describeCycle(c []*simTxn) string {
	parts := make([]string, len(c))
	for i, t := range c {
		where := "past its table"
		if g.table[t] {
			where = "in its table"
		}
		parts[i] = fmt.Sprintf("%v waits for %v (%s)", t, g.waits[t], where)
	}
	return strings.Join(parts, " → ")
}

// quietLocked reports whether the cluster is quiet: a leader, no request queued and no reply
// held back, every node's watch established and caught up and not held back, every node with a
// lease. Called with w.mu held.
func (w *simWorld) quietLocked() bool {
	if w.leaderless {
		return false
	}
	s := w.etcd
	s.mu.Lock()
	quiet := len(s.calls) == 0 && len(s.late) == 0
	for _, st := range s.streams {
		if !st.closed && (!st.created || st.heldFor > 0 || len(st.queue) > 0) {
			quiet = false
		}
	}
	s.mu.Unlock()
	for _, n := range w.nodes {
		n.c.mu.Lock()
		if !n.c.watching || n.c.sess == nil {
			quiet = false
		}
		n.c.mu.Unlock()
	}
	return quiet
}

// checkDeadlocksLocked is the oracle's look after a step: it keeps the graph for (b) and
// checks (a). Called with w.mu held.
func (w *simWorld) checkDeadlocksLocked() {
	d := &w.deadlocks
	g := w.waitGraphLocked(nil)
	d.snaps = append(d.snaps, simWaitSnap{rev: w.etcd.revision(), g: g})
	quiet := w.quietLocked()
	ages := map[string]*simCycleAge{}
	for key, c := range g.cycles() {
		a := d.ages[key]
		switch {
		case a == nil:
			a = &simCycleAge{since: len(w.steps) - 1}
		case d.fault:
			a.clean = 0
		case d.quietAdvance:
			a.clean++
			w.history.counts.cyclesJudged++
		}
		ages[key] = a
		if a.clean > 0 && quiet && !w.tearingDown {
			w.fail("the cycle %s, there since step %d, outlived a quiet tick of the clock with no fault since: the cluster is quiet again and no wait of it failed "+
				"(every node looks for cycles every 10 ms while it has holders or waits in the graph, and whenever it changes; the victim's node fails its wait)",
				g.describeCycle(c), a.since)
		}
	}
	d.ages, d.quiet, d.quietAdvance, d.fault = ages, quiet, false, false
}

// lockFailedLocked judges a Lock of t that failed, while its wait is still in the graph: if it
// failed with ErrDeadlock, checks (b), (c) and (d). Called with w.mu held.
func (w *simWorld) lockFailedLocked(t *simTxn, err error) {
	var de *recordlock.DeadlockError
	if !errors.As(err, &de) {
		return
	}
	v := simVictim{txn: t.name}
	for _, dw := range de.Cycle {
		v.members = append(v.members, dw.Txn)
	}
	if de.Cycle[0].Node == "" { // a cycle within t's node, which its table found as t queued
		w.history.counts.localVictims++
		v.rev = w.etcd.revision()
		if g := w.waitGraphLocked(t); !g.onCycle(t) {
			w.fail("%v failed with %v in its node's table, but its wait for %v is on no cycle (no victim without a cycle)", t, err, t.plan[t.next])
		}
		w.checkOneVictimLocked(v, err)
		return
	}
	w.history.counts.victims++
	if t.id == 0 {
		w.fail("%v failed with %v, but the oracle never saw its Txn's ID, so cannot find its confirming Txn", t, err)
		return
	}
	v.rev = w.confirmedAt(t)
	if v.rev == 0 {
		w.fail("%v failed with %v, but etcd never deleted its wait %s (a victim's node confirms the cycle in a Txn that deletes its wait)",
			t, err, simName(t.node.c.waitKey(t.id)))
		return
	}
	snaps := w.deadlocks.snaps
	if w.tearingDown && len(snaps) > 0 && v.rev > snaps[len(snaps)-1].rev {
		// Teardown answers every request left and runs the clock until the waits run out, with
		// no check between: none saw the truth as this Txn landed.
		w.checkOneVictimLocked(v, err)
		return
	}
	var snap *simWaitSnap
	for i := len(snaps) - 1; i >= 0 && snap == nil; i-- {
		if snaps[i].rev < v.rev {
			snap = &snaps[i]
		}
	}
	if snap == nil || !snap.g.onCycle(t) {
		w.fail("%v failed with %v, confirmed at revision %d, but as that Txn landed its wait for %v was on no cycle (no victim without a cycle: "+
			"a cycle is confirmed only if every key it was read from is unchanged, and a wait that ends deletes its key first)",
			t, err, v.rev, t.plan[t.next])
	}
	w.checkOneVictimLocked(v, err)
	w.checkVictimRuleLocked(t, de, v.rev)
}

// checkOneVictimLocked checks (c) for a new victim v and keeps it. Called with w.mu held.
func (w *simWorld) checkOneVictimLocked(v simVictim, err error) {
	for _, o := range w.deadlocks.victims {
		a, b := o, v // a confirmed first
		if b.rev < a.rev {
			a, b = b, a
		}
		if slices.Contains(b.members[1:], a.txn) {
			w.fail("%s failed with ErrDeadlock at revision %d, and then %s at revision %d for a cycle through it (%v): "+
				"two victims of one cycle (exactly one wait of a cycle fails)", a.txn, a.rev, b.txn, b.rev, err)
		}
	}
	w.deadlocks.victims = append(w.deadlocks.victims, v)
}

// confirmedAt returns the revision that deleted t's wait last: its node's confirming Txn's. 0 if
// none did.
func (w *simWorld) confirmedAt(t *simTxn) int64 {
	key := t.node.c.waitKey(t.id)
	evs, _ := w.etcd.since(0)
	for i := len(evs) - 1; i >= 0; i-- {
		if string(evs[i].Kv.Key) == key && evs[i].Type == mvccpb.DELETE {
			return evs[i].Kv.ModRevision
		}
	}
	return 0
}

// writtenBefore returns the ModRevision key had just before revision rev, 0 if it did not exist.
func (w *simWorld) writtenBefore(key string, rev int64) int64 {
	evs, _ := w.etcd.since(0)
	for i := len(evs) - 1; i >= 0; i-- {
		if ev := evs[i]; string(ev.Kv.Key) == key && ev.Kv.ModRevision < rev {
			if ev.Type == mvccpb.DELETE {
				return 0
			}
			return ev.Kv.ModRevision
		}
	}
	return 0
}

// checkVictimRuleLocked checks (d): t, confirmed at revision rev, is the victim the rule names
// in the cycle de names. Called with w.mu held.
func (w *simWorld) checkVictimRuleLocked(t *simTxn, de *recordlock.DeadlockError, rev int64) {
	best, bestRev, fallback, fallbackRev := -1, int64(0), -1, int64(0)
	for i, dw := range de.Cycle {
		var m *simTxn
		for _, n := range w.nodes {
			if n.name == dw.Node {
				m = w.txnNamed(n, dw.Txn)
			}
		}
		if m == nil || m.id == 0 {
			continue // a Txn the oracle cannot name: (c) and (b) judge the cycle
		}
		began := w.writtenBefore(m.node.c.waitKey(m.id), rev)
		if began == 0 {
			continue // a wait within its node on the cycle's path
		}
		into := de.Cycle[(i+len(de.Cycle)-1)%len(de.Cycle)]
		queued := into.ColumnFamily == dw.ColumnFamily && string(into.Key) == string(dw.Key)
		switch {
		case !queued && began > bestRev:
			best, bestRev = i, began
		case queued && began > fallbackRev:
			fallback, fallbackRev = i, began
		}
	}
	if best < 0 {
		best = fallback
	}
	if best != 0 {
		named := "none"
		if best > 0 {
			named = de.Cycle[best].Txn + "@" + de.Cycle[best].Node
		}
		w.fail("%v failed with %v, but the rule names %s its victim (the cycle's cross-node wait that began last: every node names the same one)",
			t, de, named)
	}
}

// txnNamed returns the Txn of n named name, live or ended, as far as the oracle still knows it:
// the victims name Txns that may have ended since. Called with w.mu held.
func (w *simWorld) txnNamed(n *simNode, name string) *simTxn {
	for _, t := range w.txns {
		if t.node == n && t.name == name {
			return t
		}
	}
	for i := len(w.deadlocks.snaps) - 1; i >= 0; i-- {
		if t := w.deadlocks.snaps[i].g.names[name]; t != nil && t.node == n {
			return t
		}
	}
	return nil
}
