package etcdcoord

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// recallLocked starts handing d back after another node asked for it: no more admissions, and
// handOver returns it once every admission is revoked. Called with c.mu held.
func (c *Coordinator) recallLocked(k string, d *delegation) {
	if d.recalled || c.closed {
		return
	}
	d.recalled = true
	c.stats.RecallsReceived++
	bound := d.sess.validUntil
	c.wg.Add(1)
	go c.handOver(k, d, bound)
}

// handOver revokes d's admissions as they become due and then hands d back. Released ones are
// revoked at once, so that what they staged is fenced; a live one is revoked when it is
// released or reaches its deadline, not before. A revocation waits for a Fence in flight, so
// the hand-back waits for it too, but not past bound (a Mono reading): the end of what the node
// trusted of its etcd lease when the recall arrived, after which etcd may let the key go anyway.
func (c *Coordinator) handOver(k string, d *delegation, bound time.Duration) {
	defer c.wg.Done()
	lapsed := make(chan struct{})
	lt := c.cfg.clock.AfterFunc(bound-c.cfg.clock.Mono(), func() { close(lapsed) })
	defer lt.Stop()
	for {
		c.mu.Lock()
		now := c.cfg.clock.Mono()
		revokes, next := d.takeDue(now)
		var wake chan struct{}
		if next != 0 {
			wake = make(chan struct{})
			d.wake = wake
		}
		c.mu.Unlock()
		if len(revokes) > 0 {
			done := make(chan struct{})
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				defer close(done)
				for _, revoke := range revokes {
					revoke() // RevokeLease: waits for a Fence in flight, fires the round's Release
				}
			}()
			select {
			case <-done:
			case <-lapsed:
				c.giveUp(k, d)
				return
			case <-c.ctx.Done():
				return // Close hands everything back
			}
		}
		if next == 0 {
			break
		}
		due := make(chan struct{})
		t := c.cfg.clock.AfterFunc(next-now, func() { close(due) })
		select {
		case <-wake:
		case <-due:
		case <-lapsed:
			t.Stop()
			c.giveUp(k, d)
			return
		case <-c.ctx.Done():
			t.Stop()
			return
		}
		t.Stop()
	}
	c.handBack([]string{k}, []*delegation{d})
}

// giveUp hands d back once the node can no longer trust its etcd lease to cover it, revoking
// whatever admission is left without waiting for it.
func (c *Coordinator) giveUp(k string, d *delegation) {
	c.mu.Lock()
	c.revokeLocked(d.takeAll())
	c.mu.Unlock()
	c.log.Warn("etcdcoord: a fenced commit outlasted the node's etcd lease; handing the key back", "key", k)
	c.handBack([]string{k}, []*delegation{d})
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

// sweepLocked hands back the delegations that no admission has used for the linger period:
// a node that locks many distinct keys must not keep them all in etcd. Called with c.mu held.
func (c *Coordinator) sweepLocked(now time.Duration) {
	c.lastSweep = now
	var ks []string
	var ds []*delegation
	for k, d := range c.delegs {
		if d.recalled {
			continue
		}
		d.prune(now)
		if !d.live() && len(d.kept) == 0 && now-d.lastEnd >= c.cfg.linger {
			d.recalled = true
			ks, ds = append(ks, k), append(ds, d)
		}
	}
	for len(ks) > 0 {
		n := min(len(ks), handBackBatch)
		bk, bd := ks[:n], ds[:n]
		c.backgroundLocked(func() { c.handBack(bk, bd) })
		ks, ds = ks[n:], ds[n:]
	}
}

// handBackBatch is how many delegations one Txn hands back; etcd allows 128 operations.
const handBackBatch = 64

// handBack deletes the delegations' keys in etcd, each only if it is still the one this node
// created, in one Txn, retrying until they are gone, the lease they live on is, or the
// coordinator closes.
func (c *Coordinator) handBack(ks []string, ds []*delegation) {
	ops := make([]clientv3.Op, len(ks))
	for i, k := range ks {
		dkey := c.dkey(k)
		ops[i] = clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(dkey), "=", int64(ds[i].token))},
			[]clientv3.Op{clientv3.OpDelete(dkey)}, nil)
	}
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(leader(c.ctx), c.cfg.reqLimit)
		_, err := c.cli.Txn(ctx).Then(ops...).Commit()
		cancel()
		if err == nil {
			break
		}
		if c.ctx.Err() != nil {
			return // Close revokes the lease, which hands everything back
		}
		c.log.Warn("etcdcoord: hand-back failed; retrying", "keys", len(ks), "attempt", attempt+1, "err", err)
		c.mu.Lock()
		lost := c.sess != ds[0].sess
		c.mu.Unlock()
		if lost || !c.sleep(min(attempt, 5)) {
			break // the lease, and every delegation on it, is gone
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, k := range ks {
		if c.delegs[k] == ds[i] {
			delete(c.delegs, k)
		}
		ds[i].end()
	}
	c.stats.HandBacks += uint64(len(ks))
}

// loseLocked forgets a delegation that etcd no longer has and revokes every admission from it
// at once, live ones included: another node may already hold the key. Called with c.mu held.
func (c *Coordinator) loseLocked(k string, d *delegation, why string) {
	if c.delegs[k] == d {
		delete(c.delegs, k)
	}
	d.recalled = true
	revokes := d.takeAll()
	d.end()
	c.stats.Lost++
	c.log.Warn("etcdcoord: a delegation disappeared from etcd; its admissions are revoked",
		"key", k, "token", d.token, "revoked", len(revokes), "why", why)
	c.revokeLocked(revokes)
}

// withdraw deletes a recall key this node wrote, or may have written, after the call that
// wrote it gave up, so that nodes queued behind it are not held up. It compares the call's own
// value, so it never deletes a later recall, and retries until etcd confirms, the lease the key
// lives on is gone, or the coordinator closes.
func (c *Coordinator) withdraw(a *ask) {
	rkey, value := c.rkey(a.k), a.value
	c.mu.Lock()
	sess := c.sess
	c.mu.Unlock()
	c.background(func() {
		for attempt := 0; ; attempt++ {
			ctx, cancel := context.WithTimeout(leader(c.ctx), c.cfg.reqLimit)
			_, err := c.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.Value(rkey), "=", value)).
				Then(clientv3.OpDelete(rkey)).
				Commit()
			cancel()
			if err == nil || c.ctx.Err() != nil {
				return
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
