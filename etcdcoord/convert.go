package etcdcoord

import (
	"context"
	"errors"
	"slices"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Changes of a delegation's mode: an exclusive delegation turned shared for a reader elsewhere
// (convert), and either change landing (switchLocked).

// convert turns d, an exclusive delegation with no exclusive admission left, shared, for the
// reader whose recall is pending: in one Txn it deletes the exclusive key and puts this node's
// shared key and the asker's, and deletes the recall. If the recall is gone, or its lease is,
// this node's shared key alone replaces the exclusive one. It retries until etcd answers, the
// node's lease is gone or the coordinator closes, and reports whether d turned shared; if the
// exclusive key is no longer d's, the watch ends d.
func (c *Coordinator) convert(k string, d *delegation) bool {
	c.mu.Lock()
	r, ok := c.recalls[k]
	key, token, sess := d.key, d.token, d.sess
	mine := c.skey(k, sess.id)
	d.next = mine
	c.mu.Unlock()
	ours := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", int64(token))}
	// Its writers' holdings go with the exclusive key; the readers' are published again.
	plain := txnReq{ifs: ours, then: []op{deleteOp(key), putOp(mine, c.node, sess.id), deleteOp(c.holdingKey(k))}}
	txn := plain
	if _, asker, shared, valid := recallLease(r.value); ok && valid && shared {
		theirs := c.skey(k, asker)
		rkey := c.rkey(k)
		txn.then = append(slices.Clip(txn.then), txnOp(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(rkey), "=", r.value), clientv3.Compare(clientv3.CreateRevision(theirs), "=", 0)},
			[]op{putOp(theirs, r.value, asker), deleteOp(rkey)}, nil))
	}
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(leader(c.ctx), c.cfg.reqLimit)
		resp, err := c.etcd.Txn(ctx, txn)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) { // the asker's lease, or this node's, is gone
			resp, err = c.etcd.Txn(ctx, plain)
		}
		cancel()
		switch {
		case err == nil && resp.Succeeded:
			c.mu.Lock()
			if c.delegs[k] == d && !d.ended && d.token < uint64(resp.Header.Revision) {
				c.switchLocked(d, mine, resp.Header.Revision)
			}
			c.mu.Unlock()
			return true
		case err == nil, errors.Is(err, rpctypes.ErrLeaseNotFound):
			return false // the exclusive key is no longer d's, or this node's lease is gone
		case c.ctx.Err() != nil || c.clientClosed():
			return false // Close revokes the lease; a closed client sends nothing more
		}
		c.log.Warn("etcdcoord: turning a delegation shared failed; retrying", "record", describeID(k), "attempt", attempt+1, "err", err)
		c.mu.Lock()
		lost := c.sess != sess || d.ended
		c.mu.Unlock()
		if lost || !c.sleep(min(attempt, 5)) {
			return false
		}
	}
}

// switchLocked follows d's change of mode by a Txn of this node that landed at revision rev:
// d is now backed by key. Called with c.mu held.
func (c *Coordinator) switchLocked(d *delegation, key string, rev int64) {
	kind, _, _ := c.parse([]byte(key))
	d.key, d.shared, d.token, d.next = key, kind == 's', uint64(rev), ""
	if d.shared {
		d.settle()
	} else {
		d.since = d.token
	}
	if r, ok := c.recalls[d.k]; ok && r.rev > rev {
		c.askedLocked(d.k, d)
	}
}
