package etcdcoord

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Giving delegations back: to the node whose recall is pending, or to etcd when nobody waits or
// the delegation went idle.

// sweepLocked hands back the delegations that no admission has used for the linger period:
// a node that locks many distinct keys must not keep them all in etcd. Called with c.mu held.
func (c *Coordinator) sweepLocked(now time.Duration) {
	c.lastSweep = now
	var back, alone []swept // handed back; revoked on their own
	for k, d := range c.delegs {
		if d.recalled || d.sharing {
			continue
		}
		// A Fence begun before a pruned admission's lease ended may still commit.
		taken := d.prune(now)
		if !d.live() && len(d.kept) == 0 && d.evicting == 0 && now-d.lastEnd >= c.cfg.linger {
			d.recalled = true
			back = append(back, swept{k, d, c.evictLocked(d, taken)})
		} else if evict := c.evictLocked(d, taken); evict != nil {
			alone = append(alone, swept{k, d, evict})
		}
	}
	// In order of key, so that one set of delegations is always handed back and revoked alike;
	// only what the sweep found is sorted, not every delegation.
	byKey := func(a, b swept) int { return strings.Compare(a.k, b.k) }
	slices.SortFunc(alone, byKey)
	for _, s := range alone {
		go s.evict()
	}
	if len(back) == 0 {
		return
	}
	slices.SortFunc(back, byKey)
	c.backgroundLocked(func() {
		for _, b := range back {
			if b.evict != nil {
				b.evict()
			}
		}
		for len(back) > 0 {
			n := min(len(back), handBackBatch)
			ks, ds := make([]string, n), make([]*delegation, n)
			for i, s := range back[:n] {
				ks[i], ds[i] = s.k, s.d
			}
			c.background(func() { c.handBack(ks, ds) })
			back = back[n:]
		}
	})
}

// swept is a delegation the sweep hands back or revokes admissions of, with that revocation.
type swept struct {
	k     string
	d     *delegation
	evict func()
}

// handBackBatch is how many delegations one Txn hands back; etcd allows 128 operations.
const handBackBatch = 64

// handOff gives a recalled delegation to the node whose recall is pending, so that the asker
// admits without another request, in one Txn that deletes this node's key and its recall: an
// exclusive one by putting the exclusive key on the asker's lease, a shared one by putting it
// there only if no other node holds the record (the last shared holder to go hands it over).
// If that recall is gone, or its lease is, the key is deleted alone.
func (c *Coordinator) handOff(k string, d *delegation) {
	c.mu.Lock()
	r, ok := c.recalls[k]
	key, token, shared := d.key, d.token, d.shared
	c.mu.Unlock()
	_, asker, _, valid := recallLease(r.value)
	if !ok || !valid {
		c.handBack([]string{k}, []*delegation{d})
		return
	}
	xkey, rkey := c.xkey(k), c.rkey(k)
	ours := clientv3.Compare(clientv3.ModRevision(key), "=", int64(token))
	asked := clientv3.Compare(clientv3.Value(rkey), "=", r.value)
	handOver := []op{putOp(xkey, r.value, asker), deleteOp(rkey)}
	// The node's holders of the record go with it, so that no cycle through them is confirmed.
	holders := deleteOp(c.holdingKey(k))
	var txn txnReq
	if shared {
		from, to := c.shared(k)
		last := []clientv3.Cmp{asked, clientv3.Compare(clientv3.CreateRevision(xkey), "=", 0),
			noneIn(from, key), noneIn(key+"\x00", to)}
		txn = txnReq{ifs: []clientv3.Cmp{ours}, then: []op{deleteOp(key), holders, txnOp(last, handOver, nil)}}
	} else {
		// The put replaces this node's exclusive key: etcd refuses a Txn that also deletes it.
		txn = txnReq{ifs: []clientv3.Cmp{ours, asked}, then: append(handOver, holders),
			els: []op{txnOp([]clientv3.Cmp{ours}, []op{deleteOp(key), holders}, nil)}}
	}
	plain := txnReq{ifs: []clientv3.Cmp{ours}, then: []op{deleteOp(key), holders}}
	c.giveBack([]string{k}, []*delegation{d}, func(ctx context.Context) error {
		_, err := c.etcd.Txn(ctx, txn)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) { // the asker's lease is gone
			_, err = c.etcd.Txn(ctx, plain)
		}
		return err
	})
}

// handBack deletes the delegations' keys in etcd, each only if it is still the one granted to
// this node, in one Txn.
func (c *Coordinator) handBack(ks []string, ds []*delegation) {
	ops := make([]op, len(ks))
	c.mu.Lock()
	for i, d := range ds {
		ops[i] = txnOp(
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(d.key), "=", int64(d.token))},
			[]op{deleteOp(d.key), deleteOp(c.holdingKey(ks[i]))}, nil)
	}
	c.mu.Unlock()
	c.giveBack(ks, ds, func(ctx context.Context) error {
		_, err := c.etcd.Txn(ctx, txnReq{then: ops})
		return err
	})
}

// giveBack runs txn, which deletes or hands over the delegations' keys, retrying until it
// succeeds, the lease they live on is gone, or the coordinator or its client closes; then
// forgets them.
func (c *Coordinator) giveBack(ks []string, ds []*delegation, txn func(ctx context.Context) error) {
	c.mu.Lock()
	for _, d := range ds {
		d.handingBack = true
	}
	c.mu.Unlock()
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(leader(c.ctx), c.cfg.reqLimit)
		err := txn(ctx)
		cancel()
		if err == nil {
			break
		}
		if c.ctx.Err() != nil {
			return // Close revokes the lease, which hands everything back
		}
		if c.clientClosed() {
			c.log.Warn("etcdcoord: the etcd client is closed; the keys lapse with the node's lease", "keys", len(ks), "err", err)
			break
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
		c.handedBackLocked(k, ds[i])
	}
}
