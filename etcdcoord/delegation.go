package etcdcoord

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/recordlock/recordlock"
)

// delegation is this node's right to admit holders of one key, backed by a key in etcd on the
// node's lease. Its fields are guarded by Coordinator.mu.
type delegation struct {
	token    uint64   // the revision that created it: the fencing token of its rounds
	sess     *session // the lease it lives on
	recalled bool     // asked back (or closing): admits no more
	ended    bool

	adm     []*admission // admissions whose lease may not have ended, in admission order from head
	head    int
	live    int           // admissions not yet released
	lastEnd time.Duration // the latest deadline of any admission

	drained chan struct{} // while recalled: closed when live reaches zero
	gone    chan struct{} // closed when the delegation is handed back or lost
}

// admission is one granted round. It is kept until its lease ends, released or not: a recall
// revokes released admissions too, so that a write staged before Release is fenced.
type admission struct {
	c        *Coordinator
	d        *delegation
	revoke   func()
	deadline time.Duration // MintedMono + lease, on the Locker's clock
	released bool
}

// admit grants a round from d. Called with c.mu held.
func (c *Coordinator) admit(d *delegation, minted, lease time.Duration, revoke func()) recordlock.Round {
	d.prune(minted)
	a := &admission{c: c, d: d, revoke: revoke, deadline: minted + lease}
	d.adm = append(d.adm, a)
	d.live++
	d.lastEnd = max(d.lastEnd, a.deadline)
	return recordlock.Round{TsR: c.cfg.stamp(), MintedMono: minted, Token: d.token, Release: a.release}
}

// release ends the admission (not the delegation). It never fails.
func (a *admission) release() error {
	c := a.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if a.released {
		return nil
	}
	a.released = true
	d := a.d
	if d.live--; d.live == 0 && d.drained != nil {
		close(d.drained)
		d.drained = nil
	}
	return nil
}

// prune drops the admissions at the head whose lease has ended; they need no revocation.
func (d *delegation) prune(now time.Duration) {
	for d.head < len(d.adm) && d.adm[d.head].deadline <= now {
		d.adm[d.head] = nil
		d.head++
	}
	if d.head == len(d.adm) {
		d.adm, d.head = d.adm[:0], 0
	} else if d.head >= 64 && d.head*2 >= len(d.adm) {
		n := copy(d.adm, d.adm[d.head:])
		clear(d.adm[n:])
		d.adm, d.head = d.adm[:n], 0
	}
}

// unended returns the revoke functions of the admissions whose lease has not ended by now.
func (d *delegation) unended(now time.Duration) []func() {
	var revokes []func()
	for _, a := range d.adm[d.head:] {
		if a.deadline > now {
			revokes = append(revokes, a.revoke)
		}
	}
	return revokes
}

func (d *delegation) end() {
	if !d.ended {
		d.ended = true
		close(d.gone)
	}
}

// recallLocked starts handing d back: no more admissions, every admission whose lease has not
// ended is revoked, and once they have drained, or their deadlines have passed, the delegation
// is deleted. Called with c.mu held.
func (c *Coordinator) recallLocked(k string, d *delegation) {
	if d.recalled || c.closed {
		return
	}
	d.recalled = true
	now := c.cfg.clock.Mono()
	revokes := d.unended(now)
	bound := now
	for _, a := range d.adm[d.head:] {
		bound = max(bound, a.deadline)
	}
	drained := make(chan struct{})
	if d.live == 0 {
		close(drained)
	} else {
		d.drained = drained
	}
	c.wg.Add(2)
	revoked := make(chan struct{})
	go func() {
		defer c.wg.Done()
		defer close(revoked)
		for _, revoke := range revokes {
			revoke() // RevokeLease: waits for a Fence in flight, fires the round's Release
		}
	}()
	go func() {
		defer c.wg.Done()
		lapsed := make(chan struct{})
		t := c.cfg.clock.AfterFunc(bound-now, func() { close(lapsed) })
		defer t.Stop()
		for _, ch := range []chan struct{}{revoked, drained} {
			select {
			case <-ch:
			case <-lapsed:
			case <-c.ctx.Done():
				return // Close hands everything back
			}
		}
		c.handBack([]string{k}, []*delegation{d})
	}()
}

// sweepLocked hands back the delegations that no admission has used for the linger period:
// a node that locks many distinct keys must not keep them all in etcd. Called with c.mu held.
func (c *Coordinator) sweepLocked(now time.Duration) {
	c.lastSweep = now
	var ks []string
	var ds []*delegation
	for k, d := range c.delegs {
		if !d.recalled && d.live == 0 && now-d.lastEnd >= c.cfg.linger {
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
// created, in one Txn, retrying until they are gone or the coordinator closes.
func (c *Coordinator) handBack(ks []string, ds []*delegation) {
	ops := make([]clientv3.Op, len(ks))
	for i, k := range ks {
		dkey := c.dkey(k)
		ops[i] = clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(dkey), "=", int64(ds[i].token))},
			[]clientv3.Op{clientv3.OpDelete(dkey)}, nil)
	}
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.reqLimit)
		_, err := c.cli.Txn(ctx).Then(ops...).Commit()
		cancel()
		if err == nil {
			break
		}
		if !c.sleep(min(attempt, 4)) {
			return
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
}
