package etcdcoord

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/recordlock/recordlock"
)

// step takes one action the seeded choice picks.
func (w *simWorld) step() {
	r := w.rng
	n := w.nodes[r.IntN(len(w.nodes))]
	w.mu.Lock()
	leaderless := w.leaderless
	w.mu.Unlock()
	if leaderless && r.IntN(20) == 0 {
		w.regainLeader()
		return
	}
	switch w.mix.pick(r) {
	case actLock:
		i := r.IntN(w.mix.records)
		rec := simRecord{cf: i / simKeys, key: simKey(i % simKeys)}
		if held := n.delegated(); leaderless && len(held) > 0 {
			rec = held[r.IntN(len(held))] // what a node cut off from the quorum could still admit
		}
		w.lock(n, rec, r.IntN(6) < w.mix.shared)
	case actRelease:
		w.release(n)
	case actFence:
		w.fence(n)
	case actEndFence: // commits often outlast their holder's lease
		w.endFence(n)
	case actAnswer:
		w.answer()
	case actLate:
		w.deliverLate()
	case actWatch:
		w.watch()
	case actLeader:
		if !leaderless {
			w.loseLeader()
		}
	case actTxn:
		w.txnStep(n)
	case actDrain:
		w.drain()
	default:
		d := []time.Duration{20 * time.Millisecond, 200 * time.Millisecond, 700 * time.Millisecond, 1500 * time.Millisecond}[r.IntN(4)]
		w.logf("clock +%v", d)
		w.mu.Lock()
		w.deadlocks.quietAdvance = w.deadlocks.quiet && d >= detectPoll // the detectors poll
		w.mu.Unlock()
		w.clock.Advance(d)
		w.etcd.expire()
	}
}

// lock starts a Lock of rec on n, shared or not; n's Locker queues it behind the node's other
// holders of rec as its table does.
func (w *simWorld) lock(n *simNode, rec simRecord, shared bool) {
	lease := []time.Duration{300 * time.Millisecond, time.Second, 2 * time.Second, 3500 * time.Millisecond}[w.rng.IntN(4)]
	timeout := []time.Duration{300 * time.Millisecond, 2 * time.Second, 6 * time.Second}[w.rng.IntN(3)]
	w.lockFor(n, rec, shared, lease, timeout)
}

// lockFor starts a Lock of rec on n with the lease and timeout given.
func (w *simWorld) lockFor(n *simNode, rec simRecord, shared bool, lease, timeout time.Duration) {
	w.mu.Lock()
	busy := n.locking >= 3
	if !busy {
		n.locking++
		if !shared {
			n.writing[rec]++
		}
	}
	outage := -1 // the outage the lock was asked in, if it was
	if w.leaderless {
		outage = w.outage
	}
	w.mu.Unlock()
	if busy {
		return
	}
	w.logf("%s locks %v shared %v lease %v timeout %v", n.name, rec, shared, lease, timeout)
	step := len(w.steps) - 1
	asked := w.etcd.revision()
	cf := n.cf
	if rec.cf == 0 {
		cf = nil
	}
	w.activity.Add(1)
	w.ops.Go(func() {
		defer w.activity.Add(1)
		h, err := n.l.LockCF(context.Background(), cf, []byte(rec.key), recordlock.Options{
			Scope: recordlock.ScopeCluster, Lease: lease, Timeout: timeout, Shared: shared})
		w.mu.Lock()
		defer w.mu.Unlock()
		n.locking--
		if !shared {
			n.writing[rec]--
		}
		if err == nil {
			w.admittedLocked(n, &simHold{rec: rec, shared: shared, asked: asked, step: step, h: h}, outage)
		}
	})
}

// pick returns a hold of n that ok accepts, chosen by the seed, or nil. The seed's index is
// into the holds in the order their Locks were asked: Locks a step admits at once hold in
// whatever order the runtime runs them.
func (w *simWorld) pick(n *simNode, ok func(h *simHold) bool) *simHold {
	var hs []*simHold
	for _, h := range n.holds {
		if ok(h) {
			hs = append(hs, h)
		}
	}
	if len(hs) == 0 {
		return nil
	}
	slices.SortStableFunc(hs, func(a, b *simHold) int { return cmp.Compare(a.step, b.step) })
	return hs[w.rng.IntN(len(hs))]
}

// release releases a holder of n; the oracle keeps it while its lease lasts, since a Fence of it
// may still run. A third of the time the holder then commits what it staged before
// the release under Fence, as lock, stage, Release, commit does.
func (w *simWorld) release(n *simNode) {
	w.releaseOf(n, func(h *simHold) bool { return h.txn == nil }, w.rng.IntN(3) == 0)
}

// releaseOf releases a holder of n that ok accepts, and then fences it if fence.
func (w *simWorld) releaseOf(n *simNode, ok func(h *simHold) bool, fence bool) {
	w.mu.Lock()
	hold := w.pick(n, func(h *simHold) bool { return !h.released && ok(h) })
	var end chan struct{}
	if hold != nil {
		hold.released = true
		if hold.endFence == nil && fence {
			end = make(chan struct{})
			hold.endFence = end
		}
	}
	w.mu.Unlock()
	if hold == nil {
		return
	}
	w.logf("%s releases %v (token %d, then fences %v)", n.name, hold.rec, hold.h.Token(), end != nil)
	w.activity.Add(1)
	w.ops.Go(func() { // off the scheduler's goroutine, as a holder of the node releases
		defer w.activity.Add(1)
		hold.h.Release()
		if end != nil {
			w.runFence(hold, end)
		}
	})
}

// fence starts a fenced commit on a handle of n, released or not, that lasts until endFence
// ends it.
func (w *simWorld) fence(n *simNode) {
	released := w.rng.IntN(2) == 0 // a released handle, if n has one, half the time
	w.fenceOf(n, func(h *simHold) bool { return h.txn == nil && h.released == released })
}

// fenceOf fences a handle of n that ok accepts, if there is one, else any handle of n.
func (w *simWorld) fenceOf(n *simNode, ok func(h *simHold) bool) {
	w.mu.Lock()
	hold := w.pick(n, func(h *simHold) bool { return h.endFence == nil && ok(h) })
	if hold == nil {
		hold = w.pick(n, func(h *simHold) bool { return h.txn == nil && h.endFence == nil })
	}
	var end chan struct{}
	if hold != nil {
		end = make(chan struct{})
		hold.endFence = end
	}
	w.mu.Unlock()
	if hold == nil {
		return
	}
	w.logf("%s fences %v (token %d, released %v)", n.name, hold.rec, hold.h.Token(), hold.released)
	w.activity.Add(1)
	w.ops.Go(func() {
		defer w.activity.Add(1)
		w.runFence(hold, end)
	})
}

// runFence runs a Fence of hold whose commit lasts until end is closed.
func (w *simWorld) runFence(hold *simHold, end chan struct{}) {
	_ = hold.h.Fence(func() error {
		w.mu.Lock()
		hold.fencing = true
		w.mu.Unlock()
		<-end
		w.mu.Lock()
		hold.fencing = false
		w.mu.Unlock()
		return nil
	})
	w.mu.Lock()
	if hold.endFence == end {
		hold.endFence = nil
	}
	w.mu.Unlock()
}

// endFence has a running fenced commit of n return.
func (w *simWorld) endFence(n *simNode) {
	w.mu.Lock()
	hold := w.pick(n, func(h *simHold) bool { return h.endFence != nil })
	var end chan struct{}
	if hold != nil {
		end = hold.endFence
	}
	w.mu.Unlock()
	if hold == nil {
		return
	}
	select {
	case <-end:
		return // already ended, its Fence not yet returned
	default:
	}
	w.logf("%s's fenced commit of %v (token %d) returns", n.name, hold.rec, hold.h.Token())
	close(end)
}

// answer has etcd answer one queued request: mostly as asked, sometimes failing it unapplied,
// applying it and losing the reply, or applying it and holding the reply back.
func (w *simWorld) answer() {
	n, _ := w.etcd.pending()
	if n == 0 {
		return
	}
	i := w.rng.IntN(n)
	applied, replied, late := true, true, false
	switch x := w.rng.IntN(20); {
	case w.mix.calm:
	case x == 0:
		applied, replied = false, false
	case x == 1:
		replied = false
	case x < 2+w.mix.late:
		late = true
	}
	w.mu.Lock()
	w.deadlocks.fault = w.deadlocks.fault || !replied
	w.mu.Unlock()
	what := w.etcd.answer(i, applied, replied, late)
	w.logf("etcd answers %s (applied %v, replied %v, late %v)", what, applied, replied, late)
}

// deliverLate delivers one reply held back, out of order with those sent since.
func (w *simWorld) deliverLate() {
	_, n := w.etcd.pending()
	if n == 0 {
		return
	}
	what := w.etcd.deliverLate(w.rng.IntN(n))
	w.logf("the late reply of %s arrives", what)
}

// watch delivers a batch of one watch's events, holds its events back for some steps, or breaks
// or compacts it.
func (w *simWorld) watch() {
	sts := w.etcd.openStreams()
	if len(sts) == 0 {
		return
	}
	st := sts[w.rng.IntN(len(sts))]
	x := w.rng.IntN(40)
	if w.mix.calm {
		x = 6 // deliver
	}
	if x < 2 {
		w.mu.Lock()
		w.deadlocks.fault = true
		w.mu.Unlock()
	}
	switch {
	case x == 0:
		w.logf("%s's watch breaks", st.node)
		w.etcd.breakStream(st, false)
	case x == 1:
		w.logf("etcd compacts; %s's watch is compacted", st.node)
		w.etcd.breakStream(st, true)
	case x < 6:
		steps := 5 + w.rng.IntN(w.mix.hold)
		w.logf("%s's watch is held back for %d steps", st.node, steps)
		w.etcd.hold(st, steps)
	default:
		n := 1 + w.rng.IntN(3)
		w.logf("%s's watch gets up to %d events", st.node, n)
		w.etcd.deliver(st, n)
	}
}

// loseLeader takes the cluster's leader away: requests and watches that require one fail.
func (w *simWorld) loseLeader() {
	w.logf("etcd loses its leader")
	w.mu.Lock()
	w.leaderless = true
	w.outage++
	w.deadlocks.fault = true
	w.mu.Unlock()
	for _, fail := range w.etcd.loseLeader() {
		fail()
		w.settle()
	}
}

func (w *simWorld) regainLeader() {
	w.logf("etcd elects a leader")
	w.mu.Lock()
	w.leaderless = false
	w.mu.Unlock()
	w.etcd.regainLeader()
}

// delegated are the records n holds a delegation of, in the order of their identities.
func (n *simNode) delegated() []simRecord {
	n.c.mu.Lock()
	ids := slices.Sorted(maps.Keys(n.c.delegs))
	n.c.mu.Unlock()
	recs := make([]simRecord, 0, len(ids))
	for _, id := range ids {
		cf, key, _ := decodeID(id)
		rec := simRecord{key: key}
		if cf == simCF {
			rec.cf = 1
		}
		recs = append(recs, rec)
	}
	return recs
}

// Txns. A Txn of the simulation locks two or three of the records, each shared or exclusive, in
// an order of its own, at cluster scope, one Lock a step: Txns on different nodes, and on one
// node (a wait in its table on the path), wait for each other in cycles that detection
// (deadlock.go) must break. A Txn whose Lock fails rolls back at once (after ErrDeadlock, as a
// victim must); one that locked its plan commits or rolls back at a later step.

// simTxnsPerNode is how many Txns a node runs at once.
const simTxnsPerNode = 2

// simTxn is a Txn of the simulation. Its fields are guarded by simWorld.mu.
type simTxn struct {
	name    string
	node    *simNode
	txn     *recordlock.Txn
	plan    []simTxnLock // the records it locks, in order
	next    int          // how many of plan it has locked
	locking bool         // a Lock of plan[next] is under way
	holds   []*simHold
	// id is the Txn's ID on its node's Locker (recordlock.TxnRef), 0 until the oracle has seen it
	// in the node's coordinator or table (simdeadlock_test.go)
	id uint64
}

// simTxnLock is a record a Txn locks, and its mode.
type simTxnLock struct {
	rec    simRecord
	shared bool
}

func (l simTxnLock) String() string {
	if l.shared {
		return l.rec.String() + " shared"
	}
	return l.rec.String()
}

func (t *simTxn) String() string { return t.name + "@" + t.node.name }

// txnStep begins a Txn on n, or has an idle Txn of n lock its next record, or end.
func (w *simWorld) txnStep(n *simNode) {
	w.mu.Lock()
	var idle []*simTxn
	live := 0
	for _, t := range w.txns {
		if t.node == n {
			live++
			if !t.locking {
				idle = append(idle, t)
			}
		}
	}
	w.mu.Unlock()
	switch {
	case len(idle) > 0 && (live == simTxnsPerNode || w.rng.IntN(4) > 0):
		t := idle[w.rng.IntN(len(idle))]
		if t.next < len(t.plan) {
			w.txnLock(t)
		} else {
			w.txnEnd(t, w.rng.IntN(2) == 0)
		}
	case live < simTxnsPerNode:
		w.beginTxn(n)
	}
}

// beginTxn begins a Txn on n, with a plan drawn by the seed, and locks its first record. Its
// records are among the first two or three, and it asks for fewer shared locks than the seed's
// plain locks do, so that Txns meet and wait for each other.
func (w *simWorld) beginTxn(n *simNode) {
	recs := 2 + w.rng.IntN(2)
	var plan []simTxnLock
	for _, i := range w.rng.Perm(recs)[:2+w.rng.IntN(recs-1)] {
		plan = append(plan, simTxnLock{rec: simRecord{cf: i / simKeys, key: simKey(i % simKeys)},
			shared: w.rng.IntN(12) < w.mix.shared})
	}
	w.txnLock(w.beginTxnPlan(n, plan))
}

// beginTxnPlan begins a Txn on n that locks plan, in order, and returns it.
func (w *simWorld) beginTxnPlan(n *simNode, plan []simTxnLock) *simTxn {
	t := &simTxn{node: n, plan: plan}
	w.mu.Lock()
	t.name = fmt.Sprintf("t%d", w.begun)
	w.begun++
	w.mu.Unlock()
	txn, err := n.l.BeginTx(recordlock.TxnOptions{Name: t.name})
	if err != nil {
		w.t.Fatalf("BeginTx: %v", err)
	}
	t.txn = txn
	w.mu.Lock()
	w.txns = append(w.txns, t)
	w.mu.Unlock()
	w.logf("%s begins Txn %s to lock %v", n.name, t.name, t.plan)
	return t
}

// txnLock starts t's Lock of its next record, with a lease and timeout the seed draws.
func (w *simWorld) txnLock(t *simTxn) {
	lease := []time.Duration{2 * time.Second, 3500 * time.Millisecond, 3500 * time.Millisecond}[w.rng.IntN(3)]
	timeout := []time.Duration{2 * time.Second, 6 * time.Second, 12 * time.Second}[w.rng.IntN(3)]
	w.txnLockFor(t, lease, timeout)
}

// txnLockFor starts t's Lock of its next record with the lease and timeout given. A Lock that
// fails rolls t back.
func (w *simWorld) txnLockFor(t *simTxn, lease, timeout time.Duration) {
	asked := w.etcd.revision()
	w.mu.Lock()
	if t.locking { // a Txn is used by one goroutine: a schedule that asks again fails instead
		w.fail("schedule: %s locks again before its Lock of %v returned", t, t.plan[t.next])
		w.mu.Unlock()
		return
	}
	l := t.plan[t.next]
	t.locking = true
	outage := -1
	if w.leaderless {
		outage = w.outage
	}
	w.mu.Unlock()
	w.logf("%s's Txn %s locks %v lease %v timeout %v", t.node.name, t.name, l, lease, timeout)
	step := len(w.steps) - 1
	cf := t.node.cf
	if l.rec.cf == 0 {
		cf = nil
	}
	w.activity.Add(1)
	w.ops.Go(func() {
		defer w.activity.Add(1)
		h, err := t.txn.LockCF(context.Background(), cf, []byte(l.rec.key), recordlock.Options{
			Scope: recordlock.ScopeCluster, Lease: lease, Timeout: timeout, Shared: l.shared})
		w.mu.Lock()
		if err == nil {
			t.locking = false
			hold := &simHold{rec: l.rec, shared: l.shared, asked: asked, step: step, h: h, txn: t}
			t.holds = append(t.holds, hold)
			if t.next++; t.next == len(t.plan) {
				w.history.counts.txnsLocked++
			}
			w.admittedLocked(t.node, hold, outage)
			w.mu.Unlock()
			return
		}
		w.lockFailedLocked(t, err) // before the wait leaves the oracle's graph
		t.locking = false
		w.endTxnLocked(t)
		w.mu.Unlock()
		t.txn.Rollback()
	})
}

// txnEnd commits or rolls back t, which no Lock of its own is under way for.
func (w *simWorld) txnEnd(t *simTxn, commit bool) {
	w.mu.Lock()
	w.endTxnLocked(t)
	w.mu.Unlock()
	if commit {
		w.logf("%s's Txn %s commits", t.node.name, t.name)
	} else {
		w.logf("%s's Txn %s rolls back", t.node.name, t.name)
	}
	w.activity.Add(1)
	w.ops.Go(func() {
		defer w.activity.Add(1)
		if commit {
			_ = t.txn.Commit() // it staged nothing: it ends, releasing its locks
		} else {
			t.txn.Rollback()
		}
	})
}

// endTxnLocked takes t out of the live Txns, its handles released as its Commit or Rollback is
// about to. Called with w.mu held.
func (w *simWorld) endTxnLocked(t *simTxn) {
	w.txns = slices.DeleteFunc(w.txns, func(u *simTxn) bool { return u == t })
	for _, h := range t.holds {
		h.released = true
	}
}

// drain has etcd answer every request as asked and every watch deliver what it has, in rounds
// (round), until the cluster is quiet (simdeadlock_test.go), or for 50 rounds. Once quiet, the
// deadlock oracle looks, and the clock ticks by 20 ms: the quiet ticks by which the oracle
// measures a cycle's life.
func (w *simWorld) drain() {
	w.logf("etcd answers everything and every watch catches up")
	for range 50 {
		w.mu.Lock()
		quiet := w.quietLocked()
		if quiet {
			w.checkDeadlocksLocked()
			w.deadlocks.quietAdvance = true
		}
		w.mu.Unlock()
		if quiet {
			w.logf("  the cluster is quiet: clock +20ms")
			w.clock.Advance(20 * time.Millisecond)
			w.etcd.expire()
			return
		}
		w.round(true)
	}
}

// round has etcd answer every request queued as asked, one at a time in callOrderLocked's order,
// and then every watch deliver what it has, one at a time, the nodes' goroutines settling after
// each. A request sent during the round waits for the next, so that a node that asks again at
// once does not keep the others waiting. log: each answer goes in the steps' log.
func (w *simWorld) round(log bool) {
	for _, c := range w.etcd.queued() {
		if what, ok := w.etcd.answerIfQueued(c); ok {
			if log {
				w.logf("  etcd answers %s", what)
			}
			w.settle()
		}
	}
	for _, st := range w.etcd.openStreams() {
		w.etcd.hold(st, 0)
		w.etcd.deliver(st, 1<<20)
		w.etcd.deliver(st, 1<<20) // a created notice first, then the events
		w.settle()
	}
}
