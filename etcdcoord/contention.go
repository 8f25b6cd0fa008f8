package etcdcoord

import (
	"time"
)

// A key that nodes take turns on is handed back to etcd as soon as this node's last holder
// releases it, as etcd's own Mutex deletes its key on Unlock: the next node's Lock then creates
// the delegation in one Txn, instead of recalling it and waiting for this node to hand it over:
// two Txns and two watch deliveries. A key no other node wants stays delegated, so that
// repeat locks make no request.

// contention is what this node knows of a key's other users.
type contention struct {
	remote time.Duration // Mono when another node last wanted or held the key
	// elsewhere is the latest revision at which another node was seen to want or hold the key;
	// last, the token of this node's latest delegation of it that has ended
	elsewhere, last int64
	local           time.Duration // Mono when a lock of this node last waited for its own hand-back
	wantedHere      bool          // local is set: a reading of 0 is a time like any other
}

// contendedLocked reports whether k should be handed back on release: the nodes take turns on
// it. That is, this node held the key before, another node wanted or held it after that (a
// recall, or its delegation on the watch), within the linger period, and no lock of this node
// has had to wait for such a hand-back within that period. A recall asks for one hand-back: a
// node that has the key again and sees no other node want it since keeps it, and its repeat
// locks make no request; so do locks of one node that follow one another, as its goroutines
// queue for the key. Called with c.mu held.
func (c *Coordinator) contendedLocked(k string, now time.Duration) bool {
	ct, ok := c.contended[k]
	return ok && ct.last > 0 && ct.elsewhere > ct.last && now-ct.remote < c.cfg.linger &&
		!ct.wantedHereWithin(now, c.cfg.linger)
}

// wantedHereWithin reports whether a lock of this node waited for its own hand-back of the key
// less than linger before now.
func (ct contention) wantedHereWithin(now, linger time.Duration) bool {
	return ct.wantedHere && now-ct.local < linger
}

// wantedElsewhereLocked records that another node wants or holds k now, as etcd's revision rev
// shows. Called with c.mu held.
func (c *Coordinator) wantedElsewhereLocked(k string, now time.Duration, rev int64) {
	ct := c.contended[k]
	ct.remote = now
	ct.elsewhere = max(ct.elsewhere, rev)
	c.contended[k] = ct
}

// usedElsewhereLocked records that the watch saw another node's delegation of k at revision
// rev, if k is known to be contended: nodes that take turns without recalls keep it so. Called
// with c.mu held.
func (c *Coordinator) usedElsewhereLocked(k string, rev int64) {
	if _, ok := c.contended[k]; ok {
		c.wantedElsewhereLocked(k, c.cfg.clock.Mono(), rev)
	}
}

// endedHereLocked records that this node's delegation of k granted at token has ended. Called
// with c.mu held.
func (c *Coordinator) endedHereLocked(k string, token int64) {
	if ct, ok := c.contended[k]; ok {
		ct.last = max(ct.last, token)
		c.contended[k] = ct
	}
}

// wantedHereLocked records that a lock of this node found d being handed back on release: this
// node wants the key again at once, so it keeps its next delegation of it. Called with c.mu
// held.
func (c *Coordinator) wantedHereLocked(d *delegation, now time.Duration) {
	if ct, ok := c.contended[d.k]; ok && d.releasedBack {
		ct.local, ct.wantedHere = now, true
		c.contended[d.k] = ct
	}
}

// pruneContendedLocked forgets the keys no node has contended for the linger period, so that
// the map holds only recently contended keys. Called with c.mu held.
func (c *Coordinator) pruneContendedLocked(now time.Duration) {
	for k, ct := range c.contended {
		if now-ct.remote >= c.cfg.linger && !ct.wantedHereWithin(now, c.cfg.linger) {
			delete(c.contended, k)
		}
	}
}

// handBackWait is the longest a Release waits for etcd to confirm its hand-back: well above a
// Txn's round trip on a LAN, well below the request timeout. Waiting, as etcd's Mutex does on
// Unlock, lets the next node's Lock find the key free and create the delegation in one Txn;
// without it that Lock often races the hand-back, recalls the key and pays a second Txn.
const handBackWait = 50 * time.Millisecond

// handBackContendedLocked starts handing d back after its last holder released it, as a recall
// would, in a goroutine of the coordinator: revoke the released admissions first, so that a
// write staged before Release is fenced, then delete the key, or hand it over to another
// node's recall that arrived meanwhile. A revocation waits for a Fence in flight, so the
// hand-back waits for it too, but not past what the node trusts of its etcd lease now
// (handOver). A lock of this node that finds the key being handed back waits for the hand-back
// and then creates a new delegation. Called with c.mu held, so that Close, which sets c.closed
// under it, either marked d recalled first or waits for the goroutine. It returns the channel
// to wait on for etcd's confirmation, nil if the caller should not wait: a hand-back has
// already outlasted handBackWait and none has been confirmed since, so that releasing many
// keys (a Locker's Close) while etcd does not answer costs one wait, not one per key.
func (c *Coordinator) handBackContendedLocked(d *delegation) <-chan struct{} {
	d.recalled = true
	d.releasedBack = true
	c.wg.Add(1)
	go c.handOver(d.k, d)
	if c.handBackSlow {
		return nil
	}
	return d.gone
}

// awaitHandBack waits for gone within handBackWait (or the request timeout, if shorter); if it
// runs out, releases stop waiting until a hand-back is confirmed.
func (c *Coordinator) awaitHandBack(gone <-chan struct{}) {
	t := time.NewTimer(min(handBackWait, c.cfg.reqLimit))
	defer t.Stop()
	select {
	case <-gone:
	case <-c.ctx.Done():
	case <-t.C:
		c.mu.Lock()
		c.handBackSlow = true
		c.mu.Unlock()
	}
}
