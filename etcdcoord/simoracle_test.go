package etcdcoord

import (
	"fmt"
	"strings"
	"time"

	"github.com/recordlock/recordlock"
)

// admittedLocked checks an admission as it is made: its token is the latest of the key, and
// etcd has this node's delegation of the key at that token. Called with w.mu held.
func (w *simWorld) admittedLocked(n *simNode, key string, h *recordlock.Handle) {
	tok := h.Token()
	if last := w.tokens[key]; tok < last.token || (tok == last.token && last.node != n.name) {
		w.fail("%s admitted to %s with token %d after %s's token %d", n.name, key, tok, last.node, last.token)
	}
	w.tokens[key] = simToken{tok, n.name}
	rev, lease := w.etcd.delegation(n.c.dkey(key))
	n.c.mu.Lock()
	var mine int64
	if n.c.sess != nil {
		mine = int64(n.c.sess.id)
	}
	n.c.mu.Unlock()
	if rev != int64(tok) || lease != mine {
		w.fail("%s admitted to %s with token %d, but etcd has its delegation at revision %d on lease %x (the node's: %x)",
			n.name, key, tok, rev, lease, mine)
	}
	n.holds = append(n.holds, &simHold{key: key, h: h})
}

// check is the oracle, run after every step.
func (w *simWorld) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Mono()
	for k := range simKeys {
		key := simKey(k)
		var authorized []string
		for _, n := range w.nodes {
			h := w.holding(n, key)
			if h == nil {
				continue
			}
			// A fenced commit authorizes its write while its node trusts its etcd lease.
			if h.fencing && !n.trusts(now) {
				h.untrusted = true
			}
			if !h.h.IsLeaseExpired() || (h.fencing && !h.untrusted) {
				authorized = append(authorized, fmt.Sprintf("%s (token %d, fencing %v)", n.name, h.h.Token(), h.fencing))
			}
		}
		if len(authorized) > 1 {
			w.fail("%s authorized on two nodes at once: %s", key, strings.Join(authorized, ", "))
		}
	}
	for _, n := range w.nodes {
		n.c.mu.Lock()
		for k, d := range n.c.delegs {
			for _, a := range d.kept {
				if !a.released && a.deadline > d.sess.validUntil {
					w.fail("%s admitted to %s until %v, past its lease trusted until %v", n.name, k, a.deadline, d.sess.validUntil)
				}
			}
		}
		if lost := n.c.stats.Lost; lost != 0 {
			w.fail("%s counted %d delegations lost with no delegation deleted by anyone but its holder", n.name, lost)
		}
		n.c.mu.Unlock()
	}
	for _, n := range w.nodes { // holders whose lease ended, with no commit running, are done
		held := n.holds[:0]
		for _, h := range n.holds {
			if h.endFence != nil || !h.h.IsLeaseExpired() {
				held = append(held, h)
			} else {
				h.h.Release()
			}
		}
		n.holds = held
	}
}

// trusts reports whether the node trusts its etcd lease at now.
func (n *simNode) trusts(now time.Duration) bool {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.c.sess != nil && now < n.c.sess.validUntil
}
