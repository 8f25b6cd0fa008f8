package etcdcoord

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watch follows every key under the prefix until the coordinator or its client closes. Each
// time it (re)starts, it first reads the prefix afresh, so that nothing that changed while it
// was down is missed, then watches from the revision of that read.
func (c *Coordinator) watch() {
	defer c.wg.Done()
	for attempt := 0; ; attempt++ {
		if c.ctx.Err() != nil || c.clientClosed() {
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
		if c.ctx.Err() != nil || c.clientClosed() {
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
	ctx, cancel := context.WithCancelCause(leader(c.ctx))
	var monitor sync.WaitGroup
	defer monitor.Wait()
	defer cancel(nil)
	monitor.Go(func() { c.etcd.Disconnected(ctx, cancel) })
	established := false
	for resp := range c.etcd.WatchPrefix(ctx, c.cfg.prefix, rev+1) {
		if err := resp.Err(); err != nil {
			if cause := context.Cause(ctx); errors.Is(cause, errDisconnected) {
				err = cause
			}
			return established, err
		}
		if resp.Created {
			established = true
			c.setWatching(true)
			continue
		}
		if c.cfg.watchLag != nil {
			c.cfg.watchLag()
		}
		c.mu.Lock()
		for _, ev := range resp.Events {
			c.applyLocked(ev.Type, ev.Kv)
		}
		c.mu.Unlock()
	}
	if cause := context.Cause(ctx); errors.Is(cause, errDisconnected) {
		return established, cause
	}
	return established, errors.New("etcdcoord: the watch closed")
}

// errDisconnected ends the watch when the client's connection to etcd stops being ready
// (etcdAPI.Disconnected).
var errDisconnected = errors.New("etcdcoord: the client lost its connection to etcd")

// resync reads every key under the prefix and brings this node's view up to date: delegations
// etcd no longer has are lost, and pending recalls are honoured. It returns the revision read.
func (c *Coordinator) resync() (int64, error) {
	ctx, cancel := context.WithTimeout(leader(c.ctx), c.cfg.reqLimit)
	defer cancel()
	resp, err := c.etcd.GetPrefix(ctx, c.cfg.prefix)
	if err != nil {
		return 0, err
	}
	rev := resp.Header.Revision
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = max(c.seen, rev)
	held := map[string]*mvccpb.KeyValue{} // key → its delegation
	clear(c.recalls)
	for _, kv := range resp.Kvs {
		switch kind, k, ok := c.parse(kv.Key); {
		case !ok:
		case kind == 'd':
			held[k] = kv
		case kind == 'r' && !c.mineLocked(kv.Value):
			c.recalls[k] = recall{rev: kv.ModRevision, value: string(kv.Value)}
		}
	}
	for k, d := range c.delegs {
		// A delegation granted after the read is not in it, and the watch will report on it.
		if kv := held[k]; d.token <= uint64(rev) && (kv == nil || kv.ModRevision != int64(d.token)) {
			c.goneLocked(k, d, "not in etcd when the watch restarted")
		}
	}
	for k, kv := range held {
		if c.delegs[k] == nil && c.sess != nil && kv.Lease == int64(c.sess.id) && !c.closed &&
			!c.endedLocked(k, kv.ModRevision) {
			c.adoptLocked(k, kv.ModRevision, kv.Value)
		}
	}
	c.resyncedLocked(rev)
	for k, r := range c.recalls {
		if d := c.delegs[k]; d != nil && r.rev > int64(d.token) {
			c.recallLocked(k, d)
		}
	}
	c.wakeAllLocked()
	return rev, nil
}

// applyLocked follows one change of a key under the prefix. Called with c.mu held.
func (c *Coordinator) applyLocked(typ mvccpb.Event_EventType, kv *mvccpb.KeyValue) {
	rev := kv.ModRevision
	c.seen = max(c.seen, rev)
	kind, k, ok := c.parse(kv.Key)
	if !ok {
		return
	}
	switch {
	case kind == 'r' && typ == clientv3.EventTypeDelete:
		delete(c.recalls, k)
	case kind == 'r' && !c.mineLocked(kv.Value):
		c.recalls[k] = recall{rev: rev, value: string(kv.Value)}
		if d := c.delegs[k]; d != nil && rev > int64(d.token) {
			c.recallLocked(k, d)
		}
	case kind == 'd':
		// Only its holder changes a delegation key once it is granted, so a change after this
		// node's grant ends this node's delegation.
		if d := c.delegs[k]; d != nil && rev > int64(d.token) {
			c.goneLocked(k, d, "deleted or overwritten in etcd")
		}
		// A late report of a grant this node has seen end is not adopted (ended.go).
		if typ == clientv3.EventTypePut && c.delegs[k] == nil && c.sess != nil &&
			kv.Lease == int64(c.sess.id) && !c.closed && !c.endedLocked(k, rev) {
			c.adoptLocked(k, rev, kv.Value)
		}
	}
	c.caughtUpLocked(k, rev)
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
		c.wakeAllLocked()
	}
}
