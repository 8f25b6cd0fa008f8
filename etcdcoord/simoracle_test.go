package etcdcoord

import (
	"fmt"
	"strings"
	"time"
)

// admittedLocked checks an admission as it is made: its token follows the record's earlier
// conflicting ones, no other node holds the record in a conflicting mode, a writer waiting for
// the record is not passed, the node did not admit while the cluster had no leader since before
// the Lock was asked, and in etcd's history the node's lease held the record without a break
// from the grant at the token to the admission. outage is the outage the Lock was asked in, -1
// if the cluster had a leader then. Called with w.mu held.
func (w *simWorld) admittedLocked(n *simNode, hold *simHold, outage int) {
	rec, tok := hold.rec, hold.h.Token()
	n.holds = append(n.holds, hold)
	seen := w.tokens[rec]
	if seen == nil {
		seen = &simTokens{any: map[string]uint64{}, exclusive: map[string]uint64{}}
		w.tokens[rec] = seen
	}
	conflicting := seen.any // an exclusive admission conflicts with every earlier one
	if hold.shared {
		conflicting = seen.exclusive // a shared one with earlier exclusive ones
	}
	for node, last := range conflicting {
		if tok < last || (tok == last && node != n.name) {
			w.fail("%s admitted to %v (shared %v) with token %d after %s's conflicting token %d "+
				"(a round's token is never lower than a conflicting earlier round's, and greater when that was on another node)",
				n.name, rec, hold.shared, tok, node, last)
		}
	}
	seen.any[n.name] = max(seen.any[n.name], tok)
	if !hold.shared {
		seen.exclusive[n.name] = max(seen.exclusive[n.name], tok)
	}
	w.replayLocked()
	ts, _ := hold.h.ClusterTsR()
	n.amu.Lock()
	at, ok := n.admits[ts]
	delete(n.admits, ts)
	n.amu.Unlock()
	if !ok {
		w.fail("%s admitted to %v with token %d, but no round of its coordinator has that TsR", n.name, rec, tok)
	}
	w.writerFirstLocked(n, hold, at)
	if hold.shared {
		w.countSharedLocked(n, hold)
	}
	if as := w.authorizingLocked()[rec]; len(as) > 0 {
		w.checkRecordLocked(rec, as)
	}
	if w.leaderless && outage == w.outage {
		w.fail("%s admitted to %v with token %d while etcd had no leader since before the Lock was asked "+
			"(every watch and request uses clientv3.WithRequireLeader, so a node cut off from the quorum stops admitting)",
			n.name, rec, tok)
	}
	if !ok {
		return
	}
	// The node's lease held the record without a break from the grant at the token to the
	// admission: by its exclusive key or its shared key, a change of its own mode going on.
	if from := w.history.heldFrom(rec.id(), at.lease, int64(tok), at.rev); from == 0 || from > int64(tok) {
		w.fail("%s admitted to %v with token %d at revision %d, but its lease %x had not held the record without a break since a grant at that token "+
			"(held from revision %d; 0: no grant at the token, or not held now) (the node never admits from a delegation etcd no longer has)",
			n.name, rec, tok, at.rev, at.lease, from)
	}
}

// writerFirstLocked checks that an admission does not pass a writer that waits for the record.
// While another node's writer's recall of the record is pending (written at revision p and not
// yet deleted at the revision etcd was at when the node admitted), the node admits no reader from
// a delegation its lease began to hold after p (a cold Txn, or a hand-over, that landed after
// the recall was written; a change of its own mode continues its hold), and, once its watch has
// applied that recall (the revision it had seen at the admission is at least p), it admits no
// holder at all: the recall stops a holding node's admissions. A call that asked before p, from
// a delegation granted before p (its own cold Txn's, or one handed over to it), is ahead of the
// writer and is admitted first. Called with w.mu held.
func (w *simWorld) writerFirstLocked(n *simNode, hold *simHold, at simAdmit) {
	rec, tok := hold.rec, hold.h.Token()
	for _, r := range w.history.writers {
		if r.id != rec.id() || r.node == n.name || !r.pendingAt(at.rev) {
			continue
		}
		switch from := w.history.heldFrom(rec.id(), at.lease, int64(tok), at.rev); {
		case hold.shared && from > r.from:
			w.fail("%s admitted a reader of %v with token %d from a delegation its lease holds since revision %d, after %s's writer's recall of revision %d, still pending "+
				"(a waiting writer is not passed by a reader that asked after it: no delegation is granted to another node while a writer's recall is pending)",
				n.name, rec, tok, from, r.node, r.from)
		case at.seen >= r.from && !(from != 0 && from < r.from && hold.asked < r.from):
			w.fail("%s admitted to %v (shared %v) with token %d after its watch applied %s's writer's recall of revision %d (seen %d), still pending "+
				"(a waiting writer is not passed: a node that has seen a writer's recall admits no new holder from its delegation)",
				n.name, rec, hold.shared, tok, r.node, r.from, at.seen)
		}
	}
}

// countSharedLocked counts a shared admission made while another node holds the record shared.
// Called with w.mu held.
func (w *simWorld) countSharedLocked(n *simNode, hold *simHold) {
	for _, o := range w.nodes {
		if o == n {
			continue
		}
		for _, h := range o.holds {
			if h.rec == hold.rec && h.shared && !h.released && !h.h.IsLeaseExpired() {
				w.history.counts.crossShared++
				return
			}
		}
	}
}

// simAuth is a handle that authorizes writes of its record now.
type simAuth struct {
	node string
	hold *simHold
}

func (a simAuth) String() string {
	return fmt.Sprintf("%s (token %d, shared %v, released %v, fencing %v)",
		a.node, a.hold.h.Token(), a.hold.shared, a.hold.released, a.hold.fencing)
}

// check is the oracle, run after every step. A handle authorizes writes of its record while its
// lease lasts, released or not (a Fence after Release runs until the deadline), and
// while a Fence of it commits, for as long as its node trusts its etcd lease. Two
// handles of one record on two nodes never authorize at once unless both are shared; on one
// node, two unreleased holders of a record are both shared.
func (w *simWorld) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.replayLocked()
	for rec, as := range w.authorizingLocked() {
		w.checkRecordLocked(rec, as)
	}
	for _, n := range w.nodes {
		n.c.mu.Lock()
		for k, d := range n.c.delegs {
			for _, a := range d.kept {
				if !a.released && a.deadline > d.sess.validUntil {
					w.fail("%s admitted to %s until %v, past its lease trusted until %v (admissions are bounded by the node's etcd lease)",
						n.name, k, a.deadline, d.sess.validUntil)
				}
			}
		}
		n.checkLostLocked(w)
		n.c.mu.Unlock()
	}
	w.checkDeadlocksLocked()
	for _, n := range w.nodes { // handles whose lease ended, with no commit running, are done
		held := n.holds[:0]
		for _, h := range n.holds {
			if h.endFence != nil || !h.h.IsLeaseExpired() {
				held = append(held, h)
				continue
			}
			if !h.released {
				h.released = true
				h.h.Release()
			}
		}
		clear(n.holds[len(held):])
		n.holds = held
	}
}

// checkLostLocked checks that n counted no delegation lost: nobody but its holder deletes a
// delegation, and etcd lets a lease go only after its node stopped trusting it. Called with
// w.mu and n.c.mu held.
func (n *simNode) checkLostLocked(w *simWorld) {
	if lost := n.c.stats.Lost; lost != 0 {
		w.fail("%s counted %d delegations lost with no delegation deleted by anyone but its holder (with no fault injected Lost stays 0)",
			n.name, lost)
	}
}

// authorizingLocked returns the handles that authorize writes now, by record. Called with w.mu
// held.
func (w *simWorld) authorizingLocked() map[simRecord][]simAuth {
	now := w.clock.Mono()
	auth := map[simRecord][]simAuth{}
	for _, n := range w.nodes {
		trusts := n.trusts(now)
		for _, h := range n.holds {
			if h.fencing && !trusts {
				h.untrusted = true
			}
			if !h.h.IsLeaseExpired() || (h.fencing && !h.untrusted) {
				auth[h.rec] = append(auth[h.rec], simAuth{n.name, h})
			}
		}
	}
	return auth
}

// checkRecordLocked checks the handles that authorize writes of rec now. Called with w.mu held.
func (w *simWorld) checkRecordLocked(rec simRecord, as []simAuth) {
	for i, a := range as {
		for _, b := range as[i+1:] {
			if a.node != b.node && !(a.hold.shared && b.hold.shared) {
				w.fail("%v authorized on two nodes at once: %v and %v (an exclusive holder on one node excludes every holder on the others, readers too; "+
					"a recall revokes released admissions and waits for running fences before the hand-back; a released handle authorizes until its deadline)",
					rec, a, b)
			}
		}
	}
	byNode := map[string][]string{}
	exclusive := map[string]bool{}
	for _, a := range as {
		if a.hold.released || a.hold.h.IsExpired() {
			continue
		}
		byNode[a.node] = append(byNode[a.node], a.String())
		exclusive[a.node] = exclusive[a.node] || !a.hold.shared
	}
	for node, hs := range byNode {
		if len(hs) > 1 && exclusive[node] {
			w.fail("%v held on %s by an exclusive holder beside another: %s (a key is held by one writer or by readers)",
				rec, node, strings.Join(hs, ", "))
		}
	}
}

// trusts reports whether the node trusts its etcd lease at now.
func (n *simNode) trusts(now time.Duration) bool {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.c.sess != nil && now < n.c.sess.validUntil
}
