package etcdcoord

import (
	"time"

	"github.com/recordlock/recordlock"
)

// delegation is this node's right to admit holders of one key, backed by a key in etcd on the
// node's lease. Its fields are guarded by Coordinator.mu, except gone, which is closed once.
type delegation struct {
	k           string   // the record key
	token       uint64   // the revision that granted it to this node: the fencing token of its rounds
	sess        *session // the lease it lives on
	honored     string   // the recall value of this node's call that it was handed over for
	recalled    bool     // admits no more: asked back, lost, idle or closing
	handingBack bool     // this node is deleting or handing over its key in etcd
	ended       bool

	// kept are the admissions a recall may have to revoke, oldest first: every live one, and
	// at most RetainedPerKey released ones whose lease has not ended. A local key is held by
	// one holder at a time, or by its sharers, so this is as long as the node's live holders.
	kept     []*admission
	released int           // how many of kept are released
	lastEnd  time.Duration // the latest deadline of any admission
	wake     chan struct{} // while handing back: closed when an admission is released

	gone chan struct{} // closed when the delegation is handed back or lost
}

func newDelegation(k string, token uint64, sess *session) *delegation {
	return &delegation{k: k, token: token, sess: sess, gone: make(chan struct{})}
}

// admission is one granted round.
type admission struct {
	c        *Coordinator
	d        *delegation
	revoke   func()
	deadline time.Duration // MintedMono + lease, on the Locker's clock
	released bool          // its round's Release ran: the local key is free
	taken    bool          // no longer in kept: revoked, being revoked, or its lease ended
}

// admitLocked grants a round from d. If that keeps one released admission too many, it returns
// the oldest one's revoke, for the caller to run once it has let go of c.mu.
func (c *Coordinator) admitLocked(d *delegation, minted, lease time.Duration, revoke func()) (recordlock.Round, func()) {
	d.prune(minted)
	var evicted func()
	if d.released >= RetainedPerKey {
		evicted = d.evictOldestReleased()
	}
	a := &admission{c: c, d: d, revoke: revoke, deadline: minted + lease}
	d.kept = append(d.kept, a)
	d.lastEnd = max(d.lastEnd, a.deadline)
	return recordlock.Round{TsR: c.cfg.stamp(), MintedMono: minted, Token: d.token, Release: a.release}, evicted
}

// release ends the admission. A key is handed back on release only while another node waits
// for it: then its recall has stopped d admitting, and handOver, waiting for the last live
// admission, goes on once woken here. Otherwise the node keeps the delegation, and the next
// lock of the key makes no request. It never fails and sends nothing to etcd.
func (a *admission) release() error {
	c := a.c
	c.mu.Lock()
	if a.released {
		c.mu.Unlock()
		return nil
	}
	a.released = true
	d := a.d
	if !a.taken {
		d.released++
	}
	if d.wake != nil {
		close(d.wake)
		d.wake = nil
	}
	handingOver := d.recalled && !d.live()
	c.mu.Unlock()
	if handingOver && c.cfg.handBackLag != nil {
		c.cfg.handBackLag()
	}
	return nil
}

// live reports whether d has an admission not yet released.
func (d *delegation) live() bool { return len(d.kept) > d.released }

// remove takes kept[i] out of kept.
func (d *delegation) remove(i int) *admission {
	a := d.kept[i]
	a.taken = true
	if a.released {
		d.released--
	}
	copy(d.kept[i:], d.kept[i+1:])
	d.kept[len(d.kept)-1] = nil
	d.kept = d.kept[:len(d.kept)-1]
	return a
}

// prune drops the released admissions whose lease has ended by now: nothing they staged can
// commit any more, so they need no revocation.
func (d *delegation) prune(now time.Duration) {
	for i := 0; i < len(d.kept); {
		if a := d.kept[i]; a.released && a.deadline <= now {
			d.remove(i)
			continue
		}
		i++
	}
}

// evictOldestReleased takes the oldest released admission out of kept and returns its revoke.
func (d *delegation) evictOldestReleased() func() {
	for i, a := range d.kept {
		if a.released {
			return d.remove(i).revoke
		}
	}
	return nil
}

// takeDue takes out of kept the admissions a recall revokes now: those released, and those
// whose deadline has passed (their Fence may still be committing; revoking waits for it). It
// returns their revokes and the earliest deadline among the admissions left, 0 if none is.
func (d *delegation) takeDue(now time.Duration) (revokes []func(), next time.Duration) {
	for i := 0; i < len(d.kept); {
		if a := d.kept[i]; a.released || a.deadline <= now {
			revokes = append(revokes, d.remove(i).revoke)
			continue
		}
		if next == 0 || d.kept[i].deadline < next {
			next = d.kept[i].deadline
		}
		i++
	}
	return revokes, next
}

// takeAll takes every kept admission out and returns their revokes: the delegation is gone or
// closing, so live holders lose their lease too.
func (d *delegation) takeAll() []func() {
	revokes := make([]func(), 0, len(d.kept))
	for len(d.kept) > 0 {
		revokes = append(revokes, d.remove(len(d.kept)-1).revoke)
	}
	return revokes
}

func (d *delegation) end() {
	if !d.ended {
		d.ended = true
		close(d.gone)
	}
}
