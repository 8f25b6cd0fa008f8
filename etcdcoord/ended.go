package etcdcoord

// A delegation this node has seen end is never adopted again. The watch may report its grant
// after the node saw it end: a cold Txn's reply created it before the watch said so, and the
// node then handed it back, or lost it, before the watch caught up. Adopting that late report
// would admit from a key etcd no longer has, with an old token, while another node may hold
// the key. The cold path's reads and the read a restarting watch begins with can be as late,
// and are held to the same rule.

// endLocked forgets d, which has ended, and remembers its token until the watch has passed a
// change of k at or after it. It does so even when the watch has already passed the grant: a
// read of the prefix sent before d ended, for a watch that restarts, may still report it.
// Called with c.mu held.
func (c *Coordinator) endLocked(k string, d *delegation) {
	if c.delegs[k] == d {
		delete(c.delegs, k)
	}
	first := !d.ended // a later report of the same end would keep the token past the watch
	d.end()
	if tok := int64(d.token); first && tok > c.ended[k] {
		c.ended[k] = tok
	}
}

// endedLocked reports whether a delegation of k granted to this node at revision rev is one it
// has seen end. Called with c.mu held.
func (c *Coordinator) endedLocked(k string, rev int64) bool {
	return rev <= c.ended[k]
}

// caughtUpLocked forgets what the watch has passed for k: it has applied every change of k up
// to rev, so no report of an ended grant of k is still to come. Called with c.mu held.
func (c *Coordinator) caughtUpLocked(k string, rev int64) {
	if tok, ok := c.ended[k]; ok && tok <= rev {
		delete(c.ended, k)
	}
}

// resyncedLocked forgets every ended grant at or before rev, the revision a fresh read of the
// prefix was taken at: the watch starts after it. Called with c.mu held.
func (c *Coordinator) resyncedLocked(rev int64) {
	for k, tok := range c.ended {
		if tok <= rev {
			delete(c.ended, k)
		}
	}
}
