package etcdcoord

import (
	"slices"
	"time"

	"github.com/recordlock/recordlock"
)

// delegation is this node's right to admit holders of one record, backed by a key in etcd on
// the node's lease: the record's exclusive key, or this node's shared key of it. Its fields are
// guarded by Coordinator.mu, except gone and settled, which are closed once.
type delegation struct {
	k       string   // the record's identity (recordID)
	key     string   // the etcd key that backs it
	shared  bool     // a shared delegation: it admits readers only
	token   uint64   // the revision that granted it to this node: the fencing token of its rounds
	since   uint64   // a recall written after it asks for d: the grant or an upgrade; a down-conversion does not wait its turn
	sess    *session // the lease it lives on
	honored string   // the recall value of this node's call that it was handed over for
	forCall bool     // that call has not been admitted from it yet, nor given up
	// held: a recall waits for the call d was created or handed over for (askedLocked); other
	// calls wait for it to close, when the recall starts or d ends
	held        chan struct{}
	recalled    bool // admits no more: asked back by a writer, lost, idle or closing
	handingBack bool // this node is deleting or handing over its key in etcd
	ended       bool

	// sharing: an exclusive delegation asked for by a reader elsewhere. It admits readers only
	// and becomes shared once no exclusive admission of it is live; settled is closed then, or
	// when it ends.
	sharing bool
	settled chan struct{}
	// yielding: handOver runs for it (a recall or a down-conversion).
	yielding bool
	// next is the key a Txn of this node that turns d into the other mode puts, once one was
	// sent: the watch switches d to it when it reports the put (switchLocked). It stays set when
	// such a Txn fails, since an earlier one, its reply lost, may have landed or still land; and
	// while d's own key lives, nothing else puts that key on this node's lease.
	next string

	// kept are the admissions a recall may have to revoke, oldest first: every live one, and
	// at most RetainedPerKey released ones whose lease has not ended. A local key is held by
	// one holder at a time, or by its sharers, so this is as long as the node's live holders.
	kept     []*admission
	released int           // how many of kept are released
	lastEnd  time.Duration // the latest deadline of any admission
	wake     chan struct{} // while handing back: closed when an admission is released

	// evicting counts the revocations of admissions let go to keep to RetainedPerKey that have
	// not returned; evicted is closed when the last returns, nil while none runs. A hand-back
	// waits for it: such a revocation waits for the Fence its admission may be running.
	evicting int
	evicted  chan struct{}

	gone chan struct{} // closed when the delegation is handed back or lost
}

func newDelegation(k, key string, shared bool, token uint64, sess *session) *delegation {
	return &delegation{k: k, key: key, shared: shared, token: token, since: token, sess: sess, gone: make(chan struct{})}
}

// admission is one granted round.
type admission struct {
	c        *Coordinator
	d        *delegation
	shared   bool
	txn      recordlock.TxnRef // the Txn it admits, zero for none
	revoke   func()
	deadline time.Duration // MintedMono + lease, on the Locker's clock
	released bool          // its round's Release ran: the local key is free
	taken    bool          // no longer in kept: revoked, being revoked, or its lease ended
}

// admitLocked grants a round from d. If that keeps one released admission too many, it lets
// the oldest one go; it lets go those whose lease has ended too. It returns their revocation,
// for the caller to start in a goroutine once it has let go of c.mu: that revocation waits for
// a Fence the admissions may be running, and the lock that evicted them must not (§12). d
// tracks it until it returns, and a hand-back of d waits for it. Called with c.mu held and c
// open, so that Close waits for the revocation too.
func (c *Coordinator) admitLocked(d *delegation, req *recordlock.Request, minted time.Duration) (recordlock.Round, func()) {
	revokes := d.prune(minted)
	if d.released >= RetainedPerKey {
		revokes = append(revokes, d.evictOldestReleased())
	}
	evict := c.evictLocked(d, revokes)
	a := &admission{c: c, d: d, shared: req.Shared, txn: req.Txn, revoke: req.Revoke, deadline: minted + req.Lease}
	d.kept = append(d.kept, a)
	d.lastEnd = max(d.lastEnd, a.deadline)
	return recordlock.Round{TsR: c.cfg.stamp(), MintedMono: minted, Token: d.token, Release: a.release}, evict
}

// evictLocked returns a func that runs revokes, those of admissions taken out of d's kept, and
// then tells d's hand-back, if one waits, that they have returned; nil if there are none.
// Called with c.mu held.
func (c *Coordinator) evictLocked(d *delegation, revokes []func()) func() {
	revokes = slices.DeleteFunc(revokes, func(revoke func()) bool { return revoke == nil })
	if len(revokes) == 0 {
		return nil
	}
	if d.evicting == 0 {
		d.evicted = make(chan struct{})
	}
	d.evicting++
	c.wg.Add(1)
	return func() {
		defer c.wg.Done()
		for _, revoke := range revokes {
			revoke()
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if d.evicting--; d.evicting == 0 {
			close(d.evicted)
			d.evicted = nil
		}
	}
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
	if c.exposed.Load() {
		c.signalDetector() // its holding may be part of a cycle another node is confirming
	}
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

// prune takes out of kept the released admissions whose lease has ended by now and returns
// their revokes: none can start a Fence any more, but one begun before its lease ended may still
// be committing, and revoking waits for it.
func (d *delegation) prune(now time.Duration) (revokes []func()) {
	for i := 0; i < len(d.kept); {
		if a := d.kept[i]; a.released && a.deadline <= now {
			revokes = append(revokes, d.remove(i).revoke)
			continue
		}
		i++
	}
	return revokes
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
// whose deadline has passed (their Fence may still be committing; revoking waits for it); only
// exclusive ones when writers alone must go. It returns their revokes and the earliest deadline
// among the admissions left that must go, 0 if none is.
func (d *delegation) takeDue(now time.Duration, writersOnly bool) (revokes []func(), next time.Duration) {
	for i := 0; i < len(d.kept); {
		if writersOnly && d.kept[i].shared {
			i++
			continue
		}
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
		d.settle()
		d.unhold()
	}
}

// unhold ends a wait of other calls for the call a recall waited for.
func (d *delegation) unhold() {
	if d.held != nil {
		close(d.held)
		d.held = nil
	}
}

// settle ends d's down-conversion, if one was under way.
func (d *delegation) settle() {
	if d.sharing {
		d.sharing = false
		close(d.settled)
	}
}
