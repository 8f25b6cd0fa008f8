package etcdcoord

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// Schedules: steps of the simulation chosen by hand rather than by a seed, each the shortest
// interleaving that breaks one rule of the protocol if its guard is missing, under the same
// oracle as the seeds. They pin what the seeds find only now and then.

// newScheduleWorld is a world whose steps a schedule takes: linger 1 s.
func newScheduleWorld(t *testing.T) *simWorld {
	mix := simMix{linger: time.Second}
	return newSimWorldMix(t, 0, rand.New(rand.NewPCG(1, 2)), mix)
}

// at takes one step of a schedule, then settles and checks; false once the oracle failed.
func (w *simWorld) at(what string, f func()) bool {
	if len(w.failures) > 0 {
		return false
	}
	w.logf("%s", what)
	f()
	w.settle()
	w.check()
	return len(w.failures) == 0
}

// answerWhere answers the oldest queued request of node whose description contains what. A
// schedule that finds no such request no longer drives the interleaving it was written for, and
// fails.
func (w *simWorld) answerWhere(node, what string, applied, replied, late bool) {
	if !w.answerIfAsked(node, what, applied, replied, late) {
		w.fail("schedule: no request of %s for %q to answer", node, what)
	}
}

// answerIfAsked is answerWhere for a request the node sends only if a guard is missing; it
// reports whether there was one.
func (w *simWorld) answerIfAsked(node, what string, applied, replied, late bool) bool {
	s := w.etcd
	s.mu.Lock()
	i := slices.IndexFunc(s.calls, func(c *simCall) bool { return c.node == node && strings.Contains(c.what, what) })
	var answered string
	if i >= 0 {
		answered = s.answerLocked(s.calls[i], applied, replied, late)
	}
	s.mu.Unlock()
	if i < 0 {
		w.logf("  (no request of %s for %q)", node, what)
		return false
	}
	w.logf("  etcd answers %s", answered)
	return true
}

// deliverLateWhere delivers the held reply of node's request whose description contains what.
func (w *simWorld) deliverLateWhere(node, what string) {
	s := w.etcd
	s.mu.Lock()
	i := slices.IndexFunc(s.late, func(c *simCall) bool { return c.node == node && strings.Contains(c.what, what) })
	s.mu.Unlock()
	if i < 0 {
		w.fail("schedule: no late reply of %s for %q to deliver", node, what)
		return
	}
	w.logf("  the late reply of %s arrives", s.deliverLate(i))
}

// expectHeld fails the schedule, saying why n should, unless n holds rec in the mode given: a
// handle of it, not released, whose lease has not ended. A schedule checks so that its steps led
// where it says.
func (w *simWorld) expectHeld(n *simNode, r simRecord, shared bool, why string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range n.holds {
		if h.rec == r && h.shared == shared && !h.released && !h.h.IsLeaseExpired() {
			return
		}
	}
	w.fail("schedule: %s does not hold %v (shared %v) (%s)", n.name, r, shared, why)
}

// stream is node's open watch, nil if none.
func (w *simWorld) stream(node string) *simStream {
	for _, st := range w.etcd.openStreams() {
		if st.node == node {
			return st
		}
	}
	return nil
}

// catchUp delivers every event node's watch has queued, lifting a hold.
func (w *simWorld) catchUp(node string) {
	if st := w.stream(node); st != nil {
		w.etcd.hold(st, 0)
		w.etcd.deliver(st, 1<<20)
	}
}

func (w *simWorld) holdWatch(node string) {
	if st := w.stream(node); st != nil {
		w.etcd.hold(st, 1<<20)
	}
}

// progress answers every queued request as asked, but those of node whose description begins
// with except (none if except is empty), and has every watch deliver what it has, again as the
// nodes send more, until nothing is left to answer or deliver.
func (w *simWorld) progress(node, except string) {
	for range 50 {
		did := false
		for _, c := range w.etcd.queued() {
			if except != "" && c.node == node && strings.HasPrefix(c.what, except) {
				continue
			}
			if what, ok := w.etcd.answerIfQueued(c); ok {
				w.logf("  etcd answers %s", what)
				w.settle()
				did = true
			}
		}
		for _, st := range w.etcd.openStreams() {
			w.etcd.mu.Lock()
			waiting := !st.created || len(st.queue) > 0
			w.etcd.mu.Unlock()
			if waiting {
				w.etcd.hold(st, 0)
				w.etcd.deliver(st, 1<<20)
				w.etcd.deliver(st, 1<<20) // a created notice first, then the events
				w.settle()
				did = true
			}
		}
		if !did {
			return
		}
	}
	w.fail("schedule: the nodes still ask after 50 rounds of answers")
}

func (w *simWorld) advance(d time.Duration) {
	w.clock.Advance(d)
	w.etcd.expire()
}

func rec(cf int, key string) simRecord { return simRecord{cf: cf, key: key} }

func of(r simRecord) func(h *simHold) bool { return func(h *simHold) bool { return h.rec == r } }

// The keys of record cf0/k0 as the steps' log names them (simName).
const (
	x00 = "x/default/k0"
	s00 = "s/default/k0"
	r00 = "r/default/k0"
)

// The writers of localDeadlockThroughAWriter.
const (
	simPlainWriter      = iota // a plain Lock
	simFreshTxnWriter          // a Txn's first Lock
	simHoldingTxnWriter        // the Lock of a Txn that holds cf1/k0
)

// localDeadlockThroughAWriter has two Txns of n0 close a cycle in its table through a writer of
// cf0/k0 queued between them, and checks that the table failed the second Txn as the victim.
func (w *simWorld) localDeadlockThroughAWriter(writer int) {
	n0 := w.nodes[0]
	k0, k1 := simTxnLock{rec: rec(0, "k0"), shared: true}, simTxnLock{rec: rec(0, "k1")}
	var t0, t1 *simTxn
	_ = w.at("n0 begins Txn t0 to lock cf0/k0 shared, then cf0/k1; t0 locks cf0/k0", func() {
		t0 = w.beginTxnPlan(n0, []simTxnLock{k0, k1})
		w.txnLockFor(t0, 3500*time.Millisecond, 6*time.Second)
	}) &&
		w.at("etcd creates n0's shared delegation of cf0/k0", func() { w.answerWhere("n0", "put "+s00, true, true, false) }) &&
		w.at("n0 begins Txn t1 to lock cf0/k1, then cf0/k0 shared; t1 locks cf0/k1", func() {
			t1 = w.beginTxnPlan(n0, []simTxnLock{k1, k0})
			w.txnLockFor(t1, 3500*time.Millisecond, 6*time.Second)
		}) &&
		w.at("etcd creates n0's delegation of cf0/k1", func() { w.answerWhere("n0", "put x/default/k1", true, true, false) }) &&
		w.at("a writer of n0 locks cf0/k0: it queues in n0's table behind t0's read", func() {
			switch writer {
			case simPlainWriter:
				w.lockFor(n0, rec(0, "k0"), false, time.Second, 6*time.Second)
			case simFreshTxnWriter:
				w.txnLockFor(w.beginTxnPlan(n0, []simTxnLock{{rec: rec(0, "k0")}}), time.Second, 6*time.Second)
			case simHoldingTxnWriter:
				t2 := w.beginTxnPlan(n0, []simTxnLock{{rec: rec(1, "k0")}, {rec: rec(0, "k0")}})
				w.txnLockFor(t2, 3500*time.Millisecond, 6*time.Second)
				w.settle()
				w.answerWhere("n0", "put x/cf1/k0", true, true, false)
				w.settle()
				w.txnLockFor(t2, time.Second, 6*time.Second)
			}
		}) &&
		w.at("t0 locks cf0/k1: it queues behind t1", func() { w.txnLockFor(t0, 3500*time.Millisecond, 6*time.Second) }) &&
		w.at("t1 locks cf0/k0 shared: it queues behind the writer, closing the cycle", func() {
			w.txnLockFor(t1, 3500*time.Millisecond, 6*time.Second)
		}) &&
		w.at("n0's table failed t1", func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.history.counts.localVictims != 1 || slices.Contains(w.txns, t1) {
				w.fail("schedule: n0's table did not fail t1 as a deadlock's victim (%d victims in tables)", w.history.counts.localVictims)
			}
		})
}

// simSchedules are the schedules, by name.
var simSchedules = map[string]func(w *simWorld){
	// A cold Txn's reply arrives after the node adopted the delegation it created (from another
	// reader's cold read, its watch held back) and handed it back: the reply must not revive it.
	"created-reply-after-hand-back": func(w *simWorld) {
		n0 := w.nodes[0]
		_ = w.at("n0's watch is held back", func() { w.holdWatch("n0") }) &&
			w.at("n0 locks cf0/k0 shared, twice", func() {
				w.lockFor(n0, rec(0, "k0"), true, 3500*time.Millisecond, 6*time.Second)
				w.settle()
				w.lockFor(n0, rec(0, "k0"), true, 300*time.Millisecond, 6*time.Second)
			}) &&
			w.at("etcd creates n0's shared delegation of k0, holding the reply back", func() { w.answerWhere("n0", "put "+s00, true, true, true) }) &&
			w.at("n0's second cold Txn reads it", func() { w.answerWhere("n0", "put "+s00, true, true, false) }) &&
			w.at("n0 releases its second reader", func() { w.releaseOf(n0, of(rec(0, "k0")), false) }) &&
			w.at("clock +1.5s; n0 locks cf0/k1, which hands k0 back as idle", func() {
				w.advance(1500 * time.Millisecond)
				w.lockFor(n0, rec(0, "k1"), false, 300*time.Millisecond, 6*time.Second)
			}) &&
			w.at("etcd deletes k0's delegation", func() { w.answerWhere("n0", "del "+s00, true, true, false) }) &&
			w.at("the creating Txn's reply arrives", func() { w.deliverLateWhere("n0", "put "+s00) })
	},
	// A cold Txn's read of the node's own delegation arrives after the node handed it back.
	"cold-read-after-hand-back": func(w *simWorld) {
		n0 := w.nodes[0]
		_ = w.at("n0's watch is held back", func() { w.holdWatch("n0") }) &&
			w.at("n0 locks cf0/k0 shared, twice", func() {
				w.lockFor(n0, rec(0, "k0"), true, 300*time.Millisecond, 6*time.Second)
				w.settle()
				w.lockFor(n0, rec(0, "k0"), true, 300*time.Millisecond, 6*time.Second)
			}) &&
			w.at("etcd creates n0's shared delegation of k0", func() { w.answerWhere("n0", "put "+s00, true, true, false) }) &&
			w.at("n0's second cold Txn reads it, its reply held back", func() { w.answerWhere("n0", "put "+s00, true, true, true) }) &&
			w.at("n0 releases its first reader", func() { w.releaseOf(n0, of(rec(0, "k0")), false) }) &&
			w.at("clock +1.5s; n0 locks cf0/k1, which hands k0 back as idle", func() {
				w.advance(1500 * time.Millisecond)
				w.lockFor(n0, rec(0, "k1"), false, 300*time.Millisecond, 6*time.Second)
			}) &&
			w.at("etcd deletes k0's delegation", func() { w.answerWhere("n0", "del "+s00, true, true, false) }) &&
			w.at("the reading Txn's reply arrives", func() { w.deliverLateWhere("n0", "put "+s00) })
	},
	// The watch reports, late, a grant the node has seen end.
	"watch-report-after-hand-back": func(w *simWorld) {
		n0 := w.nodes[0]
		_ = w.at("n0's watch is held back", func() { w.holdWatch("n0") }) &&
			w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, 300*time.Millisecond, 6*time.Second) }) &&
			w.at("etcd creates n0's delegation of k0", func() { w.answerWhere("n0", "put "+x00, true, true, false) }) &&
			w.at("n0 releases cf0/k0", func() { w.releaseOf(n0, of(rec(0, "k0")), false) }) &&
			w.at("clock +1.5s; n0 locks cf0/k1, which hands k0 back as idle", func() {
				w.advance(1500 * time.Millisecond)
				w.lockFor(n0, rec(0, "k1"), false, 300*time.Millisecond, 6*time.Second)
			}) &&
			w.at("etcd deletes k0's delegation", func() { w.answerWhere("n0", "del "+x00, true, true, false) }) &&
			w.at("n0's watch gets the creation of k0 only", func() {
				st := w.stream("n0")
				w.etcd.hold(st, 0)
				w.etcd.deliver(st, 1)
			}) &&
			w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, 300*time.Millisecond, 6*time.Second) })
	},
	// A resync's read from before the node's own hand-back arrives after it, the watch having
	// reported the grant already.
	"resync-read-after-hand-back": func(w *simWorld) {
		n0 := w.nodes[0]
		_ = w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, 300*time.Millisecond, 6*time.Second) }) &&
			w.at("etcd creates n0's delegation of k0", func() { w.answerWhere("n0", "put "+x00, true, true, false) }) &&
			w.at("n0's watch reports it", func() { w.catchUp("n0") }) &&
			w.at("n0's watch breaks", func() { w.etcd.breakStream(w.stream("n0"), false) }) &&
			w.at("clock +100ms: n0 reads the prefix again", func() { w.advance(100 * time.Millisecond) }) &&
			w.at("etcd answers the read, its reply held back", func() { w.answerWhere("n0", "get", true, true, true) }) &&
			w.at("n0 releases cf0/k0", func() { w.releaseOf(n0, of(rec(0, "k0")), false) }) &&
			w.at("clock +1.5s; n0 locks cf0/k1, which hands k0 back as idle", func() {
				w.advance(1500 * time.Millisecond)
				w.lockFor(n0, rec(0, "k1"), false, 300*time.Millisecond, 6*time.Second)
			}) &&
			w.at("etcd deletes k0's delegation", func() { w.answerWhere("n0", "del "+x00, true, true, false) }) &&
			w.at("the read's reply arrives, and n0's new watch is established", func() {
				w.deliverLateWhere("n0", "get")
				w.settle()
				w.catchUp("n0")
			}) &&
			w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, 300*time.Millisecond, 6*time.Second) })
	},
	// A recall finds a released admission whose Fence still commits: the hand-off waits for it.
	"hand-off-after-released-fence": func(w *simWorld) {
		n0, n1 := w.nodes[0], w.nodes[1]
		_ = w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, 3500*time.Millisecond, 2*time.Second) }) &&
			w.at("etcd creates n0's delegation of k0", func() { w.answerWhere("n0", "put "+x00, true, true, false) }) &&
			w.at("n0 releases cf0/k0 and commits under Fence", func() { w.releaseOf(n0, of(rec(0, "k0")), true) }) &&
			w.at("n1 locks cf0/k0", func() { w.lockFor(n1, rec(0, "k0"), false, time.Second, 6*time.Second) }) &&
			w.at("etcd writes n1's recall", func() { w.answerWhere("n1", "put "+x00, true, true, false) }) &&
			w.at("n0's watch reports the recall", func() { w.catchUp("n0") }) &&
			w.at("etcd hands k0 over to n1, if n0 asked", func() { w.answerIfAsked("n0", "put "+x00+" del "+r00, true, true, false) }) &&
			w.at("n1's watch reports it", func() { w.catchUp("n1") })
	},
	// A recall waits for a live admission's Fence past the deadline of the etcd lease the node
	// had when the recall came, since the node refreshed that lease meanwhile.
	"fence-past-refreshed-lease": func(w *simWorld) {
		n0, n1 := w.nodes[0], w.nodes[1]
		_ = w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, 3500*time.Millisecond, 2*time.Second) }) &&
			w.at("etcd creates n0's delegation of k0", func() { w.answerWhere("n0", "put "+x00, true, true, false) }) &&
			w.at("n0 fences cf0/k0", func() { w.fenceOf(n0, of(rec(0, "k0"))) }) &&
			w.at("n1 locks cf0/k0", func() { w.lockFor(n1, rec(0, "k0"), false, time.Second, 6*time.Second) }) &&
			w.at("etcd writes n1's recall", func() { w.answerWhere("n1", "put "+x00, true, true, false) }) &&
			w.at("n0's watch reports the recall", func() { w.catchUp("n0") }) &&
			w.at("clock +3s; n0 locks cf0/k1 for 3.5s, refreshing its lease", func() {
				w.advance(3 * time.Second)
				w.lockFor(n0, rec(0, "k1"), false, 3500*time.Millisecond, 2*time.Second)
			}) &&
			w.at("etcd refreshes n0's lease", func() { w.answerWhere("n0", "keepalive", true, true, false) }) &&
			w.at("clock +700ms: the admission's deadline passes", func() { w.advance(700 * time.Millisecond) }) &&
			w.at("clock +700ms: the lease n0 had when recalled ends", func() { w.advance(700 * time.Millisecond) }) &&
			w.at("etcd hands k0 over to n1, if n0 asked", func() { w.answerIfAsked("n0", "put "+x00+" del "+r00, true, true, false) }) &&
			w.at("n1's watch reports it", func() { w.catchUp("n1") }) &&
			w.at("etcd refreshes n1's lease, if n1 asked", func() { w.answerIfAsked("n1", "keepalive", true, true, false) })
	},
	// A down-conversion lands after the reader it was for gave up and a writer asked: the node's
	// delegation, shared now, must still follow the writer's recall, which its watch reports
	// after the conversion's reply, at a revision below the conversion's.
	"conversion-past-a-writers-recall": func(w *simWorld) {
		n0, n1, n2 := w.nodes[0], w.nodes[1], w.nodes[2]
		_ = w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, 3500*time.Millisecond, 2*time.Second) }) &&
			w.at("etcd creates n0's delegation of k0", func() { w.answerWhere("n0", "put "+x00, true, true, false) }) &&
			w.at("n0 releases cf0/k0", func() { w.releaseOf(n0, of(rec(0, "k0")), false) }) &&
			w.at("n1 locks cf0/k0 shared", func() { w.lockFor(n1, rec(0, "k0"), true, time.Second, 300*time.Millisecond) }) &&
			w.at("etcd writes n1's recall", func() { w.answerWhere("n1", "put "+s00, true, true, false) }) &&
			w.at("n0's watch reports it: n0 turns its delegation shared", func() { w.catchUp("n0") }) &&
			w.at("clock +300ms: n1's lock gives up", func() { w.advance(300 * time.Millisecond) }) &&
			w.at("etcd deletes n1's recall", func() { w.answerWhere("n1", "del "+r00, true, true, false) }) &&
			w.at("n2 locks cf0/k0", func() { w.lockFor(n2, rec(0, "k0"), false, time.Second, 6*time.Second) }) &&
			w.at("etcd writes n2's recall", func() { w.answerWhere("n2", "put "+x00, true, true, false) }) &&
			w.at("etcd turns n0's delegation shared", func() { w.answerWhere("n0", "del "+x00+" put "+s00, true, true, false) }) &&
			w.at("n0's watch reports the withdrawal, the writer's recall and the conversion", func() { w.catchUp("n0") }) &&
			w.at("n0 locks cf0/k0 shared", func() { w.lockFor(n0, rec(0, "k0"), true, time.Second, 6*time.Second) }) &&
			w.at("etcd hands k0 over to n2", func() { w.answerWhere("n0", "del "+s00+"/1 txn{put "+x00+" del "+r00, true, true, false) }) &&
			w.at("n2's watch reports it", func() { w.catchUp("n2") }) &&
			w.at("n2 holds cf0/k0", func() {
				w.expectHeld(n2, rec(0, "k0"), false, "the writer is granted once the node that turned shared has handed back")
			})
	},
	// Readers on two nodes; one node's writer turns its shared delegation exclusive only once the
	// other reader has handed back: a shared delegation admits no writer, and the upgrade's Txn
	// requires no other node's shared key. The node's watch reports the upgrade before its reply.
	"upgrade-recalls-the-other-reader": func(w *simWorld) {
		n0, n1 := w.nodes[0], w.nodes[1]
		_ = w.at("n0 locks cf0/k0 shared", func() { w.lockFor(n0, rec(0, "k0"), true, 3500*time.Millisecond, 6*time.Second) }) &&
			w.at("etcd creates n0's shared delegation", func() { w.answerWhere("n0", "put "+s00, true, true, false) }) &&
			w.at("n1 locks cf0/k0 shared", func() { w.lockFor(n1, rec(0, "k0"), true, 3500*time.Millisecond, 6*time.Second) }) &&
			w.at("etcd creates n1's shared delegation", func() { w.answerWhere("n1", "put "+s00, true, true, false) }) &&
			w.at("n0 releases its reader", func() { w.releaseOf(n0, of(rec(0, "k0")), false) }) &&
			w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, time.Second, 6*time.Second) }) &&
			w.at("etcd writes n0's recall, n1's shared key in the way", func() { w.answerWhere("n0", "del "+s00+"/1 put "+x00, true, true, false) }) &&
			w.at("n1's watch reports the recall", func() { w.catchUp("n1") }) &&
			w.at("n1 releases its reader", func() { w.releaseOf(n1, of(rec(0, "k0")), false) }) &&
			w.at("etcd deletes n1's shared key", func() { w.answerWhere("n1", "del "+s00+"/2", true, true, false) }) &&
			w.at("n0's watch reports it", func() { w.catchUp("n0") }) &&
			w.at("etcd turns n0's delegation exclusive, holding the reply back", func() { w.answerWhere("n0", "del "+s00+"/1 put "+x00, true, true, true) }) &&
			w.at("n0's watch reports the upgrade", func() { w.catchUp("n0") }) &&
			w.at("the upgrade's reply arrives", func() { w.deliverLateWhere("n0", "del "+s00+"/1 put "+x00) }) &&
			w.at("n0 holds cf0/k0", func() {
				w.expectHeld(n0, rec(0, "k0"), false, "a node's writer turns its shared delegation exclusive once the other node's reader has handed back")
			})
	},
	// A writer's Txn that turns its node's shared delegation exclusive lands, its reply lost, and
	// the next writer's Txn for the same change fails on it, the watch held back: when the watch
	// reports the first Txn, the node's delegation becomes the exclusive key rather than lost; and
	// the writer, which was refreshing the lease meanwhile, is admitted from it rather than turn
	// it exclusive again.
	"upgrade-landed-with-its-reply-lost": func(w *simWorld) {
		n0 := w.nodes[0]
		_ = w.at("n0 locks cf0/k0 shared", func() { w.lockFor(n0, rec(0, "k0"), true, 300*time.Millisecond, 6*time.Second) }) &&
			w.at("etcd creates n0's shared delegation", func() { w.answerWhere("n0", "put "+s00, true, true, false) }) &&
			w.at("n0's watch reports it", func() { w.catchUp("n0") }) &&
			w.at("n0 releases its reader", func() { w.releaseOf(n0, of(rec(0, "k0")), false) }) &&
			w.at("n0's watch is held back", func() { w.holdWatch("n0") }) &&
			w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, time.Second, 2*time.Second) }) &&
			w.at("etcd turns n0's delegation exclusive, and the reply is lost: the lock fails", func() {
				w.answerWhere("n0", "del "+s00+"/1 put "+x00, true, false, false)
			}) &&
			w.at("n0 locks cf0/k0 again", func() { w.lockFor(n0, rec(0, "k0"), false, 3500*time.Millisecond, 6*time.Second) }) &&
			w.at("clock +600ms: the lock's next try must refresh n0's lease first", func() { w.advance(600 * time.Millisecond) }) &&
			w.at("etcd answers the second Txn: it fails, the first having landed", func() {
				w.answerWhere("n0", "del "+s00+"/1 put "+x00, true, true, false)
			}) &&
			w.at("n0's watch reports the first Txn", func() { w.catchUp("n0") }) &&
			w.at("etcd refreshes n0's lease", func() { w.answerWhere("n0", "keepalive", true, true, false) }) &&
			w.at("etcd answers a Txn of n0 that turns its exclusive key into itself, if n0 sends one", func() {
				w.answerIfAsked("n0", "del "+x00+" put "+x00, true, true, false)
			}) &&
			w.at("n0 holds cf0/k0", func() {
				w.expectHeld(n0, rec(0, "k0"), false, "the writer is admitted from the exclusive key its node's first Txn put")
			})
	},
	// Two Txns of one node close a cycle in its table through a plain writer queued between them:
	// the reader the table fails as the victim waits for the other Txn's read of the record
	// through that writer, which the deadlock oracle's graph of Txns holds as maybe-edges.
	"local-deadlock-through-a-queued-writer": func(w *simWorld) { w.localDeadlockThroughAWriter(simPlainWriter) },
	// As local-deadlock-through-a-queued-writer, the writer a third Txn of the node, which holds
	// nothing yet: the oracle has not seen its ID, so reads none of its waits.
	"local-deadlock-through-a-queued-txn": func(w *simWorld) { w.localDeadlockThroughAWriter(simFreshTxnWriter) },
	// As local-deadlock-through-a-queued-txn, the writer a Txn that holds another record: the
	// oracle reads its wait from the table.
	"local-deadlock-through-a-queued-txn-that-holds": func(w *simWorld) { w.localDeadlockThroughAWriter(simHoldingTxnWriter) },
	// A cycle across nodes that goes away as its victim's node confirms it: the wait of the other
	// Txn runs out and deletes its key first, so the confirming Txn, which compares every key
	// the cycle was read from, fails, and nobody is a victim.
	"cycle-gone-before-its-confirmation": func(w *simWorld) {
		n0, n1 := w.nodes[0], w.nodes[1]
		k0, k1 := simTxnLock{rec: rec(0, "k0")}, simTxnLock{rec: rec(0, "k1")}
		var t0, t1 *simTxn
		_ = w.at("n0's Txn t0 locks cf0/k0", func() {
			t0 = w.beginTxnPlan(n0, []simTxnLock{k0, k1})
			w.txnLockFor(t0, 3500*time.Millisecond, 6*time.Second)
		}) &&
			w.at("n1's Txn t1 locks cf0/k1", func() {
				t1 = w.beginTxnPlan(n1, []simTxnLock{k1, k0})
				w.txnLockFor(t1, 3500*time.Millisecond, 6*time.Second)
			}) &&
			w.at("etcd answers everything", func() { w.progress("", "") }) &&
			w.at("t0 locks cf0/k1, which t1 holds", func() { w.txnLockFor(t0, 3500*time.Millisecond, 2*time.Second) }) &&
			w.at("etcd answers everything", func() { w.progress("", "") }) &&
			w.at("t1 locks cf0/k0, which t0 holds: a cycle", func() { w.txnLockFor(t1, 3500*time.Millisecond, 12*time.Second) }) &&
			w.at("etcd answers everything but n1's Txn that confirms the cycle, t1's wait its victim", func() {
				w.progress("n1", "txn{del w/n1/")
			}) &&
			w.at("clock +2s: t0's wait runs out", func() { w.advance(2 * time.Second) }) &&
			w.at("etcd deletes t0's wait", func() { w.answerWhere("n0", "txn{del w/n0/", true, true, false) }) &&
			w.at("etcd answers n1's Txn that confirms the cycle", func() { w.answerWhere("n1", "txn{del w/n1/", true, true, false) }) &&
			w.at("t1 still waits", func() {
				w.mu.Lock()
				defer w.mu.Unlock()
				if !slices.Contains(w.txns, t1) || !t1.locking || w.history.counts.victims != 0 {
					w.fail("schedule: t1 no longer waits (%d victims across nodes)", w.history.counts.victims)
				}
			})
	},
	// A Txn's wait across nodes lives on its node's etcd lease, which ends while the wait goes on:
	// the node takes a new lease, and the wait is put again on it, so that the cycle the wait
	// then closes, through another Txn of its node queued behind it, is seen and broken.
	"wait-put-again-on-a-new-lease": func(w *simWorld) {
		n0, n1 := w.nodes[0], w.nodes[1]
		k0, k1 := simTxnLock{rec: rec(0, "k0")}, simTxnLock{rec: rec(0, "k1")}
		var t0, t1, t2 *simTxn
		_ = w.at("clock +2s", func() { w.advance(2 * time.Second) }) &&
			w.at("n1's Txn t0 locks cf0/k1", func() {
				t0 = w.beginTxnPlan(n1, []simTxnLock{k1, k0})
				w.txnLockFor(t0, 3500*time.Millisecond, 12*time.Second)
			}) &&
			w.at("etcd answers everything", func() { w.progress("", "") }) &&
			w.at("n0's Txn t1 locks cf0/k1, which t0 holds, for 300ms: n0's lease needs no refresh", func() {
				t1 = w.beginTxnPlan(n0, []simTxnLock{k1})
				w.txnLockFor(t1, 300*time.Millisecond, 12*time.Second)
			}) &&
			w.at("etcd answers everything: t1's wait is on n0's lease", func() { w.progress("", "") }) &&
			w.at("clock +3s: n0's lease ends in etcd, t1's wait with it", func() { w.advance(3 * time.Second) }) &&
			w.at("etcd answers everything: n0 takes a new lease", func() { w.progress("", "") }) &&
			w.at("n0's Txn t2 locks cf0/k0", func() {
				t2 = w.beginTxnPlan(n0, []simTxnLock{k0, k1})
				w.txnLockFor(t2, 3500*time.Millisecond, 12*time.Second)
			}) &&
			w.at("etcd answers everything", func() { w.progress("", "") }) &&
			w.at("t2 locks cf0/k1: it queues in n0's table behind t1", func() { w.txnLockFor(t2, 3500*time.Millisecond, 12*time.Second) }) &&
			w.at("t0 locks cf0/k0, which t2 holds: a cycle", func() { w.txnLockFor(t0, 3500*time.Millisecond, 12*time.Second) }) &&
			w.at("etcd answers everything", func() { w.progress("", "") }) &&
			w.at("the cluster is quiet: the clock ticks", func() { w.drain() }) &&
			w.at("the cycle has a victim", func() {
				w.mu.Lock()
				defer w.mu.Unlock()
				if w.history.counts.victims != 1 {
					w.fail("schedule: the cycle of t0, t2 and t1 has no victim (%d victims across nodes)", w.history.counts.victims)
				}
			})
	},
	// A writer recalls two readers' nodes: neither admits another reader, the first to hand back
	// deletes its key only, and the last hands the record over.
	"writer-recalls-two-readers": func(w *simWorld) {
		n0, n1, n2 := w.nodes[0], w.nodes[1], w.nodes[2]
		_ = w.at("n0 locks cf0/k0 shared", func() { w.lockFor(n0, rec(0, "k0"), true, 3500*time.Millisecond, 6*time.Second) }) &&
			w.at("etcd creates n0's shared delegation", func() { w.answerWhere("n0", "put "+s00, true, true, false) }) &&
			w.at("n1 locks cf0/k0 shared", func() { w.lockFor(n1, rec(0, "k0"), true, 3500*time.Millisecond, 6*time.Second) }) &&
			w.at("etcd creates n1's shared delegation", func() { w.answerWhere("n1", "put "+s00, true, true, false) }) &&
			w.at("n2 locks cf0/k0", func() { w.lockFor(n2, rec(0, "k0"), false, time.Second, 6*time.Second) }) &&
			w.at("etcd writes n2's recall", func() { w.answerWhere("n2", "put "+x00, true, true, false) }) &&
			w.at("n0's and n1's watches report it", func() { w.catchUp("n0"); w.catchUp("n1") }) &&
			w.at("n0 locks cf0/k0 shared again", func() { w.lockFor(n0, rec(0, "k0"), true, time.Second, 6*time.Second) }) &&
			w.at("n0 releases its first reader", func() { w.releaseOf(n0, of(rec(0, "k0")), false) }) &&
			w.at("etcd deletes n0's shared key, n1's still there", func() { w.answerWhere("n0", "del "+s00+"/1 txn{put "+x00, true, true, false) }) &&
			w.at("n2's watch reports it", func() { w.catchUp("n2") }) &&
			w.at("n1 releases its reader", func() { w.releaseOf(n1, of(rec(0, "k0")), false) }) &&
			w.at("etcd hands the record over to n2", func() { w.answerWhere("n1", "del "+s00+"/2 txn{put "+x00, true, true, false) }) &&
			w.at("n2's watch reports it", func() { w.catchUp("n2") }) &&
			w.at("etcd answers n2's cold Txn, sent when n0's key went", func() { w.answerWhere("n2", "put "+x00, true, true, false) }) &&
			w.at("n2 holds cf0/k0", func() {
				w.expectHeld(n2, rec(0, "k0"), false, "the last reader to hand back hands the record over to the waiting writer")
			})
	},
	// A reader that asks after a waiting writer creates no shared delegation of its own.
	"reader-after-a-waiting-writer": func(w *simWorld) {
		n0, n1, n2 := w.nodes[0], w.nodes[1], w.nodes[2]
		_ = w.at("n0 locks cf0/k0 shared", func() { w.lockFor(n0, rec(0, "k0"), true, 3500*time.Millisecond, 6*time.Second) }) &&
			w.at("etcd creates n0's shared delegation", func() { w.answerWhere("n0", "put "+s00, true, true, false) }) &&
			w.at("n2 locks cf0/k0", func() { w.lockFor(n2, rec(0, "k0"), false, time.Second, 6*time.Second) }) &&
			w.at("etcd writes n2's recall", func() { w.answerWhere("n2", "put "+x00, true, true, false) }) &&
			w.at("n1 locks cf0/k0 shared", func() { w.lockFor(n1, rec(0, "k0"), true, time.Second, 6*time.Second) }) &&
			w.at("etcd answers n1's cold Txn", func() { w.answerWhere("n1", "put "+s00, true, true, false) }) &&
			w.at("n0's watch reports n2's recall", func() { w.catchUp("n0") }) &&
			w.at("n0 releases its reader", func() { w.releaseOf(n0, of(rec(0, "k0")), false) }) &&
			w.at("etcd hands the record over to n2", func() { w.answerWhere("n0", "del "+s00+"/1 txn{put "+x00, true, true, false) }) &&
			w.at("n2's watch reports it", func() { w.catchUp("n2") }) &&
			w.at("n2 holds cf0/k0", func() {
				w.expectHeld(n2, rec(0, "k0"), false, "the reader that held the record hands it over to the waiting writer")
			})
	},
	// A reader recalls a writer's node: the holder turns its delegation shared once its writer
	// has released, in one Txn that puts the reader's shared key too. The holder's watch reports
	// the conversion before its reply: the deletion of its exclusive key is no loss.
	"reader-recalls-a-writer-and-shares": func(w *simWorld) {
		n0, n1 := w.nodes[0], w.nodes[1]
		_ = w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, 3500*time.Millisecond, 6*time.Second) }) &&
			w.at("etcd creates n0's delegation", func() { w.answerWhere("n0", "put "+x00, true, true, false) }) &&
			w.at("n1 locks cf0/k0 shared", func() { w.lockFor(n1, rec(0, "k0"), true, time.Second, 6*time.Second) }) &&
			w.at("etcd writes n1's recall", func() { w.answerWhere("n1", "put "+s00, true, true, false) }) &&
			w.at("n0's watch reports it", func() { w.catchUp("n0") }) &&
			w.at("n0 releases its writer", func() { w.releaseOf(n0, of(rec(0, "k0")), false) }) &&
			w.at("etcd turns n0's delegation shared, holding the reply back", func() { w.answerWhere("n0", "del "+x00+" put "+s00, true, true, true) }) &&
			w.at("n0's watch reports the conversion", func() { w.catchUp("n0") }) &&
			w.at("the conversion's reply arrives", func() { w.deliverLateWhere("n0", "del "+x00+" put "+s00) }) &&
			w.at("n1's watch reports its shared key", func() { w.catchUp("n1") }) &&
			w.at("n1 holds cf0/k0 shared", func() {
				w.expectHeld(n1, rec(0, "k0"), true, "a reader's recall of an exclusive delegation turns it shared, with the reader's shared key")
			})
	},
	// A reader recalls the node of an exclusive delegation whose live holders are all readers:
	// the node turns it shared at once and its readers keep their admissions.
	"conversion-keeps-the-holders-readers": func(w *simWorld) {
		n0, n1 := w.nodes[0], w.nodes[1]
		_ = w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, 300*time.Millisecond, 6*time.Second) }) &&
			w.at("etcd creates n0's delegation", func() { w.answerWhere("n0", "put "+x00, true, true, false) }) &&
			w.at("n0 releases its writer", func() { w.releaseOf(n0, of(rec(0, "k0")), false) }) &&
			w.at("n0 locks cf0/k0 shared, from its exclusive delegation", func() { w.lockFor(n0, rec(0, "k0"), true, 3500*time.Millisecond, 6*time.Second) }) &&
			w.at("n1 locks cf0/k0 shared", func() { w.lockFor(n1, rec(0, "k0"), true, 3500*time.Millisecond, 6*time.Second) }) &&
			w.at("etcd writes n1's recall", func() { w.answerWhere("n1", "put "+s00, true, true, false) }) &&
			w.at("n0's watch reports it", func() { w.catchUp("n0") }) &&
			w.at("etcd turns n0's delegation shared, if n0 asked", func() { w.answerIfAsked("n0", "del "+x00+" put "+s00, true, true, false) }) &&
			w.at("n1's watch reports its shared key", func() { w.catchUp("n1") }) &&
			w.at("n0 and n1 hold cf0/k0 shared", func() {
				w.expectHeld(n0, rec(0, "k0"), true, "the node of an exclusive delegation whose live holders are readers keeps them as it turns shared")
				w.expectHeld(n1, rec(0, "k0"), true, "a reader's recall of an exclusive delegation whose live holders are readers turns it shared at once")
			})
	},
	// A writer of a node whose delegation is turning shared for a reader elsewhere waits for the
	// conversion, then turns it exclusive again by recalling the reader.
	"writer-waits-for-a-conversion": func(w *simWorld) {
		n0, n1 := w.nodes[0], w.nodes[1]
		_ = w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, 300*time.Millisecond, 6*time.Second) }) &&
			w.at("etcd creates n0's delegation", func() { w.answerWhere("n0", "put "+x00, true, true, false) }) &&
			w.at("n0 releases cf0/k0", func() { w.releaseOf(n0, of(rec(0, "k0")), false) }) &&
			w.at("n1 locks cf0/k0 shared", func() { w.lockFor(n1, rec(0, "k0"), true, 3500*time.Millisecond, 6*time.Second) }) &&
			w.at("etcd writes n1's recall", func() { w.answerWhere("n1", "put "+s00, true, true, false) }) &&
			w.at("n0's watch reports it: n0 turns its delegation shared", func() { w.catchUp("n0") }) &&
			w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, time.Second, 6*time.Second) }) &&
			w.at("etcd turns n0's delegation shared", func() { w.answerWhere("n0", "del "+x00+" put "+s00, true, true, false) }) &&
			w.at("n1's watch reports its shared key", func() { w.catchUp("n1") }) &&
			w.at("etcd writes n0's recall", func() { w.answerWhere("n0", "del "+s00+"/1 put "+x00, true, true, false) }) &&
			w.at("n1's watch reports it", func() { w.catchUp("n1") }) &&
			w.at("n1 releases its reader", func() { w.releaseOf(n1, of(rec(0, "k0")), false) }) &&
			w.at("etcd deletes n1's shared key", func() { w.answerWhere("n1", "del "+s00+"/2", true, true, false) }) &&
			w.at("n0's watch reports it", func() { w.catchUp("n0") }) &&
			w.at("etcd turns n0's delegation exclusive", func() { w.answerWhere("n0", "del "+s00+"/1 put "+x00, true, true, false) }) &&
			w.at("n0 holds cf0/k0", func() {
				w.expectHeld(n0, rec(0, "k0"), false, "the writer turns its node's delegation exclusive once the reader it was shared with has handed back")
			})
	},
	// Two readers of one node ask at once: the second's Txn must not overwrite the first's grant.
	"second-reader-of-a-node": func(w *simWorld) {
		n0 := w.nodes[0]
		_ = w.at("n0 locks cf0/k0 shared, twice", func() {
			w.lockFor(n0, rec(0, "k0"), true, 3500*time.Millisecond, 6*time.Second)
			w.settle()
			w.lockFor(n0, rec(0, "k0"), true, 3500*time.Millisecond, 6*time.Second)
		}) &&
			w.at("etcd creates n0's shared delegation", func() { w.answerWhere("n0", "put "+s00, true, true, false) }) &&
			w.at("etcd answers the second reader's Txn", func() { w.answerWhere("n0", "put "+s00, true, true, false) }) &&
			w.at("n0's watch reports them", func() { w.catchUp("n0") }) &&
			w.at("n0 holds cf0/k0 shared", func() { w.expectHeld(n0, rec(0, "k0"), true, "two readers of one node share its shared delegation") })
	},
	// As conversion-past-a-writers-recall, but the node learns of the writer's recall from the
	// read its restarting watch begins with.
	"conversion-past-a-writers-recall-resync": func(w *simWorld) {
		n0, n1, n2 := w.nodes[0], w.nodes[1], w.nodes[2]
		_ = w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, 3500*time.Millisecond, 2*time.Second) }) &&
			w.at("etcd creates n0's delegation of k0", func() { w.answerWhere("n0", "put "+x00, true, true, false) }) &&
			w.at("n0 releases cf0/k0", func() { w.releaseOf(n0, of(rec(0, "k0")), false) }) &&
			w.at("n1 locks cf0/k0 shared", func() { w.lockFor(n1, rec(0, "k0"), true, time.Second, 300*time.Millisecond) }) &&
			w.at("etcd writes n1's recall", func() { w.answerWhere("n1", "put "+s00, true, true, false) }) &&
			w.at("n0's watch reports it: n0 turns its delegation shared", func() { w.catchUp("n0") }) &&
			w.at("clock +300ms: n1's lock gives up", func() { w.advance(300 * time.Millisecond) }) &&
			w.at("etcd deletes n1's recall", func() { w.answerWhere("n1", "del "+r00, true, true, false) }) &&
			w.at("n2 locks cf0/k0", func() { w.lockFor(n2, rec(0, "k0"), false, time.Second, 6*time.Second) }) &&
			w.at("etcd writes n2's recall", func() { w.answerWhere("n2", "put "+x00, true, true, false) }) &&
			w.at("etcd turns n0's delegation shared", func() { w.answerWhere("n0", "del "+x00+" put "+s00, true, true, false) }) &&
			w.at("n0's watch breaks", func() { w.etcd.breakStream(w.stream("n0"), false) }) &&
			w.at("clock +100ms: n0 reads the prefix again", func() { w.advance(100 * time.Millisecond) }) &&
			w.at("etcd answers the read", func() { w.answerWhere("n0", "get", true, true, false) }) &&
			w.at("n0's new watch is established", func() { w.catchUp("n0") }) &&
			w.at("n0 locks cf0/k0 shared", func() { w.lockFor(n0, rec(0, "k0"), true, time.Second, 6*time.Second) }) &&
			w.at("etcd hands k0 over to n2", func() { w.answerWhere("n0", "del "+s00+"/1 txn{put "+x00+" del "+r00, true, true, false) }) &&
			w.at("n2's watch reports it", func() { w.catchUp("n2") }) &&
			w.at("n2 holds cf0/k0", func() {
				w.expectHeld(n2, rec(0, "k0"), false, "the writer is granted once the node that turned shared has handed back")
			})
	},
	// A released handle's Fence outlasts its lease, and the node hands the delegation back as
	// idle: the hand-back waits for the commit, as a recall's does.
	"idle-hand-back-after-a-fence-past-its-lease": func(w *simWorld) {
		n0, n1 := w.nodes[0], w.nodes[1]
		_ = w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, 300*time.Millisecond, 6*time.Second) }) &&
			w.at("etcd creates n0's delegation of k0", func() { w.answerWhere("n0", "put "+x00, true, true, false) }) &&
			w.at("n0 releases cf0/k0 and commits under Fence", func() { w.releaseOf(n0, of(rec(0, "k0")), true) }) &&
			w.at("clock +1.5s; n0 locks cf0/k1, which hands k0 back as idle once the commit returns", func() {
				w.advance(1500 * time.Millisecond)
				w.lockFor(n0, rec(0, "k1"), false, 300*time.Millisecond, 6*time.Second)
			}) &&
			w.at("etcd deletes k0's delegation, if n0 asked", func() { w.answerIfAsked("n0", "del "+x00, true, true, false) }) &&
			w.at("n1 locks cf0/k0", func() { w.lockFor(n1, rec(0, "k0"), false, time.Second, 6*time.Second) }) &&
			w.at("etcd writes n1's recall", func() { w.answerWhere("n1", "put "+x00, true, true, false) }) &&
			w.at("n0's fenced commit returns", func() { w.endFence(n0) }) &&
			w.at("etcd deletes k0's delegation", func() { w.answerWhere("n0", "del "+x00, true, true, false) }) &&
			w.at("n1's watch reports it", func() { w.catchUp("n1") }) &&
			w.at("etcd creates n1's delegation", func() { w.answerWhere("n1", "put "+x00, true, true, false) }) &&
			w.at("n1 holds cf0/k0", func() {
				w.expectHeld(n1, rec(0, "k0"), false, "the idle hand-back goes on once the commit returns")
			})
	},
	// A released handle's Fence outlasts its lease, and a later lock of the node lets the
	// admission go: a recall then waits for the commit all the same.
	"recall-after-a-fence-past-its-lease": func(w *simWorld) {
		n0, n1 := w.nodes[0], w.nodes[1]
		_ = w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, 300*time.Millisecond, 6*time.Second) }) &&
			w.at("etcd creates n0's delegation of k0", func() { w.answerWhere("n0", "put "+x00, true, true, false) }) &&
			w.at("n0 releases cf0/k0 and commits under Fence", func() { w.releaseOf(n0, of(rec(0, "k0")), true) }) &&
			w.at("clock +500ms; n0 locks cf0/k0 again", func() {
				w.advance(500 * time.Millisecond)
				w.lockFor(n0, rec(0, "k0"), false, 300*time.Millisecond, 6*time.Second)
			}) &&
			w.at("n0 releases its second lock", func() {
				w.releaseOf(n0, func(h *simHold) bool { return h.rec == rec(0, "k0") && h.endFence == nil }, false)
			}) &&
			w.at("n1 locks cf0/k0", func() { w.lockFor(n1, rec(0, "k0"), false, time.Second, 6*time.Second) }) &&
			w.at("etcd writes n1's recall", func() { w.answerWhere("n1", "put "+x00, true, true, false) }) &&
			w.at("n0's watch reports it", func() { w.catchUp("n0") }) &&
			w.at("etcd hands k0 over to n1, if n0 asked", func() { w.answerIfAsked("n0", "put "+x00+" del "+r00, true, true, false) }) &&
			w.at("n1's watch reports it", func() { w.catchUp("n1") }) &&
			w.at("n0's fenced commit returns", func() { w.endFence(n0) }) &&
			w.at("etcd hands k0 over to n1", func() { w.answerWhere("n0", "put "+x00+" del "+r00, true, true, false) }) &&
			w.at("n1's watch reports it", func() { w.catchUp("n1") }) &&
			w.at("n1 holds cf0/k0", func() {
				w.expectHeld(n1, rec(0, "k0"), false, "the hand-over goes on once the commit returns")
			})
	},
	// The cluster loses its leader: a node stops admitting from its delegations.
	"no-leader": func(w *simWorld) {
		n0 := w.nodes[0]
		_ = w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, 300*time.Millisecond, 2*time.Second) }) &&
			w.at("etcd creates n0's delegation of k0", func() { w.answerWhere("n0", "put "+x00, true, true, false) }) &&
			w.at("n0 releases cf0/k0", func() { w.releaseOf(n0, of(rec(0, "k0")), false) }) &&
			w.at("etcd loses its leader", func() { w.loseLeader() }) &&
			w.at("n0 locks cf0/k0", func() { w.lockFor(n0, rec(0, "k0"), false, 300*time.Millisecond, 2*time.Second) })
	},
}

// TestSimulationSchedules runs each schedule under the oracle.
func TestSimulationSchedules(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(simSchedules)) {
		schedule := simSchedules[name]
		t.Run(name, func(t *testing.T) {
			w := newScheduleWorld(t)
			schedule(w)
			w.teardown()
			if testing.Verbose() {
				t.Logf("steps:\n  %s", strings.Join(w.steps, "\n  "))
			}
			if len(w.failures) > 0 {
				t.Fatalf("the schedule broke an invariant:\nfailures:\n  %s\nsteps:\n  %s",
					strings.Join(w.failures, "\n  "), strings.Join(w.steps, "\n  "))
			}
		})
	}
}
