package etcdcoord

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"slices"
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
		// A Txn that changes a delegation's mode deletes its old key and puts its new one at one
		// revision: the put is applied first, so that the delete is not taken for a loss.
		slices.SortStableFunc(resp.Events, func(a, b *clientv3.Event) int {
			return cmp.Or(cmp.Compare(a.Kv.ModRevision, b.Kv.ModRevision), cmp.Compare(a.Type, b.Type))
		})
		c.mu.Lock()
		for _, ev := range resp.Events {
			c.applyLocked(ev.Type, ev.Kv)
		}
		graphChanged := c.graph.changed
		c.graph.changed = false
		c.mu.Unlock()
		if graphChanged {
			c.signalDetector()
		}
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
	var mine clientv3.LeaseID
	if c.sess != nil {
		mine = c.sess.id
	}
	held := map[string]*mvccpb.KeyValue{} // every delegation key, by its etcd key
	ours := map[string]*mvccpb.KeyValue{} // record → its delegation on this node's lease
	clear(c.recalls)
	c.graph = newGraphView()
	for _, kv := range resp.Kvs {
		if c.applyGraphLocked(mvccpb.PUT, kv) {
			continue
		}
		switch kind, id, ok := c.parse(kv.Key); {
		case !ok:
		case kind == 'r':
			if !c.mineLocked(kv.Value) {
				c.recalls[id] = newRecall(kv)
			}
		default:
			held[string(kv.Key)] = kv
			if mine != 0 && kv.Lease == int64(mine) {
				ours[id] = kv
			}
		}
	}
	for k, d := range c.delegs {
		if kv := held[d.next]; d.next != "" && kv != nil && kv.Lease == int64(mine) && uint64(kv.ModRevision) > d.token {
			c.switchLocked(d, d.next, kv.ModRevision) // this node's change of mode landed
		}
		// A delegation granted after the read is not in it, and the watch will report on it.
		if kv := held[d.key]; d.token <= uint64(rev) && (kv == nil || kv.ModRevision != int64(d.token)) {
			c.goneLocked(k, d, "not in etcd when the watch restarted")
		}
	}
	for k, kv := range ours {
		if c.delegs[k] == nil && !c.closed && !c.endedLocked(k, kv.ModRevision) {
			kind, _, _ := c.parse(kv.Key)
			c.adoptLocked(k, string(kv.Key), kind == 's', kv.ModRevision, kv.Value)
		}
	}
	c.resyncedLocked(rev)
	for k, r := range c.recalls {
		if d := c.delegs[k]; d != nil && r.rev > int64(d.since) {
			c.askedLocked(k, d)
		}
	}
	c.wakeAllLocked()
	c.signalDetector()
	return rev, nil
}

// newRecall reads a recall key.
func newRecall(kv *mvccpb.KeyValue) recall {
	_, _, shared, _ := recallLease(string(kv.Value))
	return recall{rev: kv.ModRevision, value: string(kv.Value), shared: shared}
}

// applyLocked follows one change of a key under the prefix. Called with c.mu held.
func (c *Coordinator) applyLocked(typ mvccpb.Event_EventType, kv *mvccpb.KeyValue) {
	rev := kv.ModRevision
	c.seen = max(c.seen, rev)
	if c.applyGraphLocked(typ, kv) {
		return
	}
	kind, k, ok := c.parse(kv.Key)
	if !ok {
		return
	}
	switch {
	case kind == 'r' && typ == clientv3.EventTypeDelete:
		delete(c.recalls, k)
	case kind == 'r' && !c.mineLocked(kv.Value):
		c.recalls[k] = newRecall(kv)
		if d := c.delegs[k]; d != nil && rev > int64(d.since) {
			c.askedLocked(k, d)
		}
	case kind == 'x', kind == 's':
		c.delegationChangedLocked(typ, kind, k, kv)
	}
	c.caughtUpLocked(k, rev)
	for _, w := range c.waiters[k] {
		w.saw(rev)
	}
}

// delegationChangedLocked follows a change of a delegation key of record k. Called with c.mu
// held.
func (c *Coordinator) delegationChangedLocked(typ mvccpb.Event_EventType, kind byte, k string, kv *mvccpb.KeyValue) {
	rev, key := kv.ModRevision, string(kv.Key)
	onMine := typ == clientv3.EventTypePut && c.sess != nil && kv.Lease == int64(c.sess.id)
	d := c.delegs[k]
	switch {
	case d == nil:
	case onMine && key == d.next && rev > int64(d.token):
		c.switchLocked(d, key, rev) // this node's change of mode landed
		return
	case key == d.key && rev > int64(d.token):
		// Only its holder changes a delegation key once it is granted, so a change after this
		// node's grant ends this node's delegation.
		c.goneLocked(k, d, "deleted or overwritten in etcd")
		d = nil
	}
	// A late report of a grant this node has seen end is not adopted (ended.go).
	if onMine && d == nil && !c.closed && !c.endedLocked(k, rev) {
		c.adoptLocked(k, key, kind == 's', rev, kv.Value)
	}
}

// parse splits a key under the prefix into its kind ('x' exclusive delegation, 's' shared
// delegation, 'r' recall) and the identity of the record it is for. Names ('n') and anything
// else report false.
func (c *Coordinator) parse(key []byte) (kind byte, id string, ok bool) {
	rest := strings.TrimPrefix(string(key), c.cfg.prefix)
	if len(rest) < 2 || rest[1] != '/' || (rest[0] != 'x' && rest[0] != 's' && rest[0] != 'r') {
		return 0, "", false
	}
	id = rest[2:]
	if rest[0] == 's' {
		i := strings.LastIndexByte(id, '/')
		if i < 0 {
			return 0, "", false
		}
		id = id[:i]
	}
	if _, _, ok := decodeID(id); !ok {
		return 0, "", false
	}
	return rest[0], id, true
}

// describeID is a record's identity as logs show it: its column family's name and its key.
func describeID(id string) string {
	cf, key, ok := decodeID(id)
	if !ok {
		return id
	}
	return cf + "/" + key
}

// decodeID returns the column family name and the key of a record's identity (recordID).
func decodeID(id string) (cf, key string, ok bool) {
	cfPart, keyPart, found := strings.Cut(id, "/")
	rawCF, err1 := base64.RawURLEncoding.DecodeString(cfPart)
	rawKey, err2 := base64.RawURLEncoding.DecodeString(keyPart)
	return string(rawCF), string(rawKey), found && err1 == nil && err2 == nil
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
