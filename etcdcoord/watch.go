package etcdcoord

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watch follows every key under the prefix until the coordinator or its client closes. Each
// time it (re)starts, it first reads the prefix afresh, so that nothing that changed while it
// was down is missed, then watches from the revision of that read.
func (c *Coordinator) watch() {
	defer c.wg.Done()
	for attempt := 0; ; attempt++ {
		if c.ctx.Err() != nil || c.cli.Ctx().Err() != nil {
			return
		}
		rev, err := c.resync()
		if err == nil {
			var established bool
			established, err = c.follow(rev)
			if established {
				attempt = 0
			}
		}
		c.setWatching(false)
		if c.ctx.Err() != nil || c.cli.Ctx().Err() != nil {
			return
		}
		c.mu.Lock()
		c.stats.WatchRestarts++
		c.mu.Unlock()
		c.log.Warn("etcdcoord: the watch on etcd broke; reading the prefix again", "attempt", attempt+1, "err", err)
		if !c.sleep(min(attempt, 4)) {
			return
		}
	}
}

// follow watches the prefix from after revision rev until the watch ends, applying each event.
// It reports whether the watch was established.
func (c *Coordinator) follow(rev int64) (bool, error) {
	ctx, cancel := context.WithCancel(leader(c.ctx))
	defer cancel()
	established := false
	for resp := range c.cli.Watch(ctx, c.cfg.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithCreatedNotify()) {
		if err := resp.Err(); err != nil {
			return established, err
		}
		if resp.Created {
			established = true
			c.setWatching(true)
			continue
		}
		c.mu.Lock()
		for _, ev := range resp.Events {
			c.applyLocked(ev.Type, ev.Kv)
		}
		c.mu.Unlock()
	}
	return established, errors.New("etcdcoord: the watch closed")
}

// resync reads every key under the prefix and brings this node's view up to date: delegations
// etcd no longer has are lost, and pending recalls are honoured. It returns the revision read.
func (c *Coordinator) resync() (int64, error) {
	ctx, cancel := context.WithTimeout(leader(c.ctx), c.cfg.reqLimit)
	defer cancel()
	resp, err := c.cli.Get(ctx, c.cfg.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	rev := resp.Header.Revision
	c.mu.Lock()
	defer c.mu.Unlock()
	held := map[string]int64{} // key → create revision of its delegation
	clear(c.recalls)
	for _, kv := range resp.Kvs {
		switch kind, k, ok := c.parse(kv.Key); {
		case !ok:
		case kind == 'd':
			held[k] = kv.CreateRevision
		case kind == 'r' && !c.mine(kv.Value):
			c.recalls[k] = kv.ModRevision
		}
	}
	for k, d := range c.delegs {
		// A delegation created after the read is not in it, and the watch will report on it.
		if d.token <= uint64(rev) && held[k] != int64(d.token) {
			c.loseLocked(k, d, "not in etcd when the watch restarted")
		}
	}
	for k, r := range c.recalls {
		if d := c.delegs[k]; d != nil && r > int64(d.token) {
			c.recallLocked(k, d)
		}
	}
	for _, ws := range c.waiters {
		for _, w := range ws {
			w.fire()
		}
	}
	return rev, nil
}

// applyLocked follows one change of a key under the prefix. Called with c.mu held.
func (c *Coordinator) applyLocked(typ mvccpb.Event_EventType, kv *mvccpb.KeyValue) {
	kind, k, ok := c.parse(kv.Key)
	if !ok {
		return
	}
	rev := kv.ModRevision
	switch {
	case kind == 'r' && typ == clientv3.EventTypeDelete:
		delete(c.recalls, k)
	case kind == 'r' && !c.mine(kv.Value):
		c.recalls[k] = rev
		if d := c.delegs[k]; d != nil {
			if rev > int64(d.token) {
				c.recallLocked(k, d)
			}
		} else if _, ok := c.unknown[k]; ok && c.inflight[k] == 0 && !c.closed {
			// A cold Txn of this node failed after it may have landed: look for the orphan.
			delete(c.unknown, k)
			c.backgroundLocked(func() { c.clearOrphan(k) })
		}
	case kind == 'd' && typ == clientv3.EventTypeDelete:
		// The key existed without a break from its creation to this delete, so a delete after
		// this node's delegation was created deletes that delegation.
		if d := c.delegs[k]; d != nil && rev > int64(d.token) {
			c.loseLocked(k, d, "deleted in etcd")
		}
	}
	for _, w := range c.waiters[k] {
		w.saw(rev)
	}
}

// parse splits a key under the prefix into its kind ('d' delegation, 'r' recall, 'n' name) and
// the record key it is for.
func (c *Coordinator) parse(key []byte) (kind byte, k string, ok bool) {
	rest := strings.TrimPrefix(string(key), c.cfg.prefix)
	if len(rest) < 2 || rest[1] != '/' || (rest[0] != 'd' && rest[0] != 'r') {
		return 0, "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest[2:])
	if err != nil {
		return 0, "", false
	}
	return rest[0], string(raw), true
}

// setWatching records whether the watch is established. While it is not, nothing is admitted
// from a delegation and every waiter looks again.
func (c *Coordinator) setWatching(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case on && !c.watching:
		c.watching = true
		close(c.up)
	case !on && c.watching:
		c.watching = false
		c.up = make(chan struct{})
		for _, ws := range c.waiters {
			for _, w := range ws {
				w.fire()
			}
		}
	}
}

// clearOrphan deletes k's delegation if it is on this node's lease but no delegation of this
// node knows it.
func (c *Coordinator) clearOrphan(k string) {
	ctx, cancel := context.WithTimeout(leader(c.ctx), c.cfg.reqLimit)
	defer cancel()
	resp, err := c.cli.Get(ctx, c.dkey(k))
	if err != nil || len(resp.Kvs) != 1 {
		return
	}
	kv := resp.Kvs[0]
	c.mu.Lock()
	orphan := c.sess != nil && kv.Lease == int64(c.sess.id) && c.delegs[k] == nil
	c.mu.Unlock()
	if orphan {
		_ = c.deleteOrphan(ctx, k, kv.CreateRevision)
	}
}
