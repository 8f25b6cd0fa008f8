package etcdcoord

import (
	"context"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/recordlock/recordlock"
)

// askedLocked follows another node's pending recall of record k, written after d was granted:
// a writer's recall hands d back; a reader's turns an exclusive d shared, and leaves a shared
// one alone. Called with c.mu held.
func (c *Coordinator) askedLocked(k string, d *delegation) {
	if c.creating[k] > 0 || d.forCall {
		// A cold Txn of this node may have created d, or another node handed d to a call of
		// this node, before the recall: that call is admitted first, and the recall then waits
		// for it like any live holder (cold.go, endAsk). Other calls wait meanwhile (held).
		if d.held == nil {
			d.held = make(chan struct{})
		}
		return
	}
	d.unhold()
	switch r := c.recalls[k]; {
	case !r.shared:
		c.recallLocked(k, d)
	case !d.shared:
		c.shareLocked(k, d)
	}
}

// recallLocked starts handing d back after another node asked for it: no more admissions, and
// handOver returns it once every admission is revoked. Called with c.mu held.
func (c *Coordinator) recallLocked(k string, d *delegation) {
	if c.closed || d.recalled {
		return
	}
	d.recalled = true
	c.stats.RecallsReceived++
	c.yieldLocked(k, d)
}

// shareLocked starts turning d, an exclusive delegation, shared after a reader elsewhere asked
// for the record: no more exclusive admissions, and handOver converts it once every exclusive
// admission is revoked; its readers keep their admissions. Called with c.mu held.
func (c *Coordinator) shareLocked(k string, d *delegation) {
	if c.closed || d.recalled || d.sharing || d.shared {
		return
	}
	d.sharing = true
	d.settled = make(chan struct{})
	c.stats.RecallsReceived++
	c.yieldLocked(k, d)
}

// yieldLocked starts handOver for d, or wakes the one running so that it sees what changed.
// Called with c.mu held.
func (c *Coordinator) yieldLocked(k string, d *delegation) {
	if d.yielding {
		if d.wake != nil {
			close(d.wake)
			d.wake = nil
		}
		return
	}
	d.yielding = true
	c.wg.Add(1)
	go c.handOver(k, d)
}

// handOver revokes d's admissions as they become due and then hands d back (recalled) or turns
// it shared (sharing; only exclusive admissions go then). Released ones are revoked at once, so
// that what they staged is fenced; a live one is revoked when it is released or reaches its
// deadline, not before. A revocation waits for a Fence in flight, so the hand-back waits for it
// too, for as long as the node trusts its etcd lease as it keeps refreshing it (trustLapse):
// after that, etcd may let the key go anyway.
func (c *Coordinator) handOver(k string, d *delegation) {
	defer c.wg.Done()
	lapsed, stopLapse := c.trustLapse(d.sess)
	defer stopLapse()
	for {
		c.mu.Lock()
		if d.ended || (!d.recalled && !d.sharing) {
			d.yielding = false
			c.mu.Unlock()
			return
		}
		writersOnly := !d.recalled
		now := c.cfg.clock.Mono()
		revokes, next := d.takeDue(now, writersOnly)
		evicted := d.evicted // no admission is evicted once d is recalled: none starts later
		var wake chan struct{}
		if next != 0 {
			wake = make(chan struct{})
			d.wake = wake
		}
		c.mu.Unlock()
		if len(revokes) > 0 || evicted != nil {
			done := make(chan struct{})
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				defer close(done)
				for _, revoke := range revokes {
					revoke() // RevokeLease: waits for a Fence in flight, fires the round's Release
				}
				if evicted != nil {
					<-evicted // the revocations of admissions let go to keep the bound, likewise
				}
			}()
			select {
			case <-done:
			case <-lapsed:
				c.giveUp(k, d, done)
				return
			case <-c.ctx.Done():
				return // Close hands everything back
			}
		}
		if next == 0 {
			c.mu.Lock()
			recalled := d.recalled
			changed := recalled && writersOnly // a writer asked while the writers went: readers go too
			c.mu.Unlock()
			switch {
			case changed:
				continue
			case recalled:
				c.handOff(k, d)
				return
			}
			if !c.convert(k, d) {
				c.mu.Lock()
				d.yielding = false
				c.mu.Unlock()
				return
			}
			continue // a writer may have asked while it turned shared
		}
		due := make(chan struct{})
		t := c.cfg.clock.AfterFunc(next-now, func() { close(due) })
		select {
		case <-wake:
		case <-due:
		case <-lapsed:
			t.Stop()
			c.giveUp(k, d, nil)
			return
		case <-c.ctx.Done():
			t.Stop()
			return
		}
		t.Stop()
	}
}

// trustLapse returns a channel closed once the clock passes what the node trusts of its etcd
// lease s, following every refresh of it, and a func that stops following.
func (c *Coordinator) trustLapse(s *session) (<-chan struct{}, func()) {
	lapsed := make(chan struct{})
	var mu sync.Mutex
	var t recordlock.Timer
	stopped := false
	var arm func()
	arm = func() {
		c.mu.Lock()
		until := s.validUntil
		c.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		switch now := c.cfg.clock.Mono(); {
		case stopped:
		case now >= until:
			close(lapsed)
		default:
			t = c.cfg.clock.AfterFunc(until-now, arm) // refreshed meanwhile: look again then
		}
	}
	arm()
	return lapsed, func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		if t != nil {
			t.Stop()
		}
	}
}

// giveUp hands d over once the node can no longer trust its etcd lease to cover it, revoking
// whatever admission is left without waiting for it. running, if not nil, is closed once the
// revocations under way when the lease ran out have returned: if they still run once the key
// is handed over, a fenced commit outlasted the lease, and that is logged.
func (c *Coordinator) giveUp(k string, d *delegation, running <-chan struct{}) {
	c.mu.Lock()
	c.revokeLocked(d.takeAll())
	c.mu.Unlock()
	c.handOff(k, d)
	if running == nil {
		return
	}
	select {
	case <-running:
	default:
		c.log.Warn("etcdcoord: a fenced commit outlasted the node's etcd lease; the key was handed back", "key", k)
	}
}

// revokeLocked runs revokes in a goroutine that Close waits for: a revocation waits for a
// Fence in flight, which must not hold up the caller. Called with c.mu held.
func (c *Coordinator) revokeLocked(revokes []func()) {
	if len(revokes) == 0 {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for _, revoke := range revokes {
			revoke()
		}
	}()
}

// recall is another node's pending request for a record.
type recall struct {
	rev    int64  // the revision that wrote it
	value  string // the asker's recall value, which names the lease to hand the key over on
	shared bool   // the asker is a reader
}

// adoptLocked records a delegation, backed by key, that etcd reports on this node's lease but
// this node does not know: one another node handed over, or one whose creating Txn's reply did
// not arrive. Called with c.mu held.
func (c *Coordinator) adoptLocked(k, key string, shared bool, rev int64, value []byte) {
	d := newDelegation(k, key, shared, uint64(rev), c.sess)
	d.lastEnd = c.cfg.clock.Mono() // kept for the linger period if nobody uses it
	if c.mineLocked(value) {
		d.honored = string(value)
		d.forCall = c.liveAsks[d.honored] // admit that call before a later recall starts
	}
	c.delegs[k] = d
	if r, ok := c.recalls[k]; ok && r.rev > rev {
		c.askedLocked(k, d)
	}
}

// handedBackLocked drops a delegation this node deleted or handed over itself, and counts it
// once: the watch, the hand-back's reply and Close may each be the first to see it end. One that
// ended otherwise (lost) is not counted. Called with c.mu held.
func (c *Coordinator) handedBackLocked(k string, d *delegation) {
	if !d.ended {
		c.stats.HandBacks++
	}
	c.endLocked(k, d)
}

// goneLocked follows the end of d's key in etcd: expected if this node was handing it back or
// no longer trusted the lease it was on, a loss otherwise. Called with c.mu held.
func (c *Coordinator) goneLocked(k string, d *delegation, why string) {
	switch {
	case d.handingBack:
		c.handedBackLocked(k, d)
	case c.cfg.clock.Mono() >= d.sess.validUntil:
		c.expiredLocked(k, d)
	default:
		c.loseLocked(k, d, why)
	}
}

// expiredLocked forgets a delegation whose key etcd deleted with the node's lease after the
// node stopped trusting that lease: no admission from it outlived that trust, so this is how an
// idle node's delegations end, not a loss. Called with c.mu held.
func (c *Coordinator) expiredLocked(k string, d *delegation) {
	d.recalled = true
	revokes := d.takeAll() // every deadline has passed; revoking waits for a Fence still running
	c.endLocked(k, d)
	c.stats.Expired++
	c.revokeLocked(revokes)
}

// loseLocked forgets a delegation that etcd no longer has and revokes every admission from it
// at once, live ones included: another node may already hold the key. Called with c.mu held.
func (c *Coordinator) loseLocked(k string, d *delegation, why string) {
	d.recalled = true
	revokes := d.takeAll()
	c.endLocked(k, d)
	c.stats.Lost++
	c.log.Warn("etcdcoord: a delegation disappeared from etcd; its admissions are revoked",
		"key", k, "token", d.token, "revoked", len(revokes), "why", why)
	c.revokeLocked(revokes)
}

// withdraw deletes a recall key this node wrote, or may have written, after the call that
// wrote it gave up, so that nodes queued behind it are not held up. It compares the call's own
// value, so it never deletes a later recall, and retries until etcd confirms, the lease the key
// lives on is gone, or the coordinator or its client closes.
func (c *Coordinator) withdraw(a *ask) {
	rkey, value := c.rkey(a.k), a.value
	c.mu.Lock()
	sess := c.sess
	c.mu.Unlock()
	c.background(func() {
		for attempt := 0; ; attempt++ {
			ctx, cancel := context.WithTimeout(leader(c.ctx), c.cfg.reqLimit)
			_, err := c.etcd.Txn(ctx, txnReq{
				ifs:  []clientv3.Cmp{clientv3.Compare(clientv3.Value(rkey), "=", value)},
				then: []op{deleteOp(rkey)},
			})
			cancel()
			if err == nil || c.ctx.Err() != nil || c.clientClosed() {
				return // a closed client sends nothing more: the key lapses with the lease
			}
			c.log.Warn("etcdcoord: withdrawing a recall failed; retrying", "key", a.k, "attempt", attempt+1, "err", err)
			c.mu.Lock()
			lost := sess == nil || c.sess != sess
			c.mu.Unlock()
			if lost || !c.sleep(min(attempt, 5)) {
				return
			}
		}
	})
}
