package etcdcoord

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/recordlock/recordlock"
)

// session is the node's etcd lease, which every delegation and recall key of the node is
// attached to. It is granted on first use and refreshed on demand (no background keepalive):
// an idle node's lease simply expires, which hands its delegations back.
type session struct {
	id clientv3.LeaseID
	// validUntil is the Mono reading until which the lease is known to live, measured from
	// before the grant or keepalive request was sent, less the skew margin. Guarded by c.mu.
	validUntil time.Duration
}

// session returns the node's lease, granted or refreshed so that it lives past need (a Mono
// reading), with the recall watch established. Lease grants and refreshes are serialized.
func (c *Coordinator) session(ctx context.Context, need time.Duration) (*session, error) {
	if err := c.startWatch(ctx); err != nil {
		return nil, err
	}
	select {
	case c.sessLock <- struct{}{}:
	case <-ctx.Done():
		return nil, requestErr(ctx, "wait for the lease", ctx.Err())
	case <-c.ctx.Done():
		return nil, errClosed
	}
	defer func() { <-c.sessLock }()

	c.mu.Lock()
	s, closed := c.sess, c.closed
	fits := s != nil && need <= s.validUntil
	c.mu.Unlock()
	switch {
	case closed:
		return nil, errClosed
	case fits:
		return s, nil
	}
	if s != nil {
		sent := c.cfg.clock.Mono()
		resp, err := c.cli.KeepAliveOnce(ctx, s.id)
		switch {
		case err == nil:
			c.mu.Lock()
			s.validUntil = max(s.validUntil, sent+time.Duration(resp.TTL)*time.Second-c.cfg.skew)
			c.mu.Unlock()
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			c.mu.Lock()
			c.dropSessionLocked(s)
			c.mu.Unlock()
			s = nil
		default:
			return nil, requestErr(ctx, "refresh the lease", err)
		}
	}
	if s == nil {
		sent := c.cfg.clock.Mono()
		resp, err := c.cli.Grant(ctx, c.ttlSec)
		if err != nil {
			return nil, requestErr(ctx, "grant a lease", err)
		}
		s = &session{id: resp.ID, validUntil: sent + time.Duration(resp.TTL)*time.Second - c.cfg.skew}
		c.mu.Lock()
		closed := c.closed
		if !closed {
			c.sess = s
		}
		c.mu.Unlock()
		if closed { // Close has revoked the lease it knew of; this one must not linger either
			_, _ = c.cli.Revoke(ctx, s.id)
			return nil, errClosed
		}
	}
	c.mu.Lock()
	valid := s.validUntil
	c.mu.Unlock()
	if need > valid {
		return nil, fmt.Errorf("%w: etcdcoord: the lease does not fit the node's etcd lease (TTL %ds less skew %v)",
			recordlock.ErrClusterUnavailable, c.ttlSec, c.cfg.skew)
	}
	return s, nil
}

// dropSessionLocked forgets a lease that etcd no longer has: its delegations are gone. Their
// admissions are revoked, in case etcd let the lease go before this node expected.
func (c *Coordinator) dropSessionLocked(s *session) {
	if c.sess == s {
		c.sess = nil
	}
	now := c.cfg.clock.Mono()
	var revokes []func()
	for k, d := range c.delegs {
		if d.sess != s {
			continue
		}
		revokes = append(revokes, d.unended(now)...)
		d.recalled = true
		d.end()
		delete(c.delegs, k)
	}
	if len(revokes) > 0 && !c.closed {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for _, revoke := range revokes {
				revoke()
			}
		}()
	}
}

// startWatch starts the recall watch on first use and waits until it is established, so that
// no delegation exists before a recall of it can be seen.
func (c *Coordinator) startWatch(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errClosed
	}
	if !c.watchStarted {
		c.watchStarted = true
		c.wg.Add(1)
		go c.watchRecalls()
	}
	c.mu.Unlock()
	select {
	case <-c.watchReady:
		return nil
	case <-ctx.Done():
		return requestErr(ctx, "watch for recalls", ctx.Err())
	case <-c.ctx.Done():
		return errClosed
	case <-c.cli.Ctx().Done():
		return fmt.Errorf("%w: etcdcoord: the etcd client is closed", recordlock.ErrClusterUnavailable)
	}
}

// watchRecalls follows every recall key under the prefix until the coordinator or its client
// closes, and starts handing back each delegation of this node that another node asks for.
func (c *Coordinator) watchRecalls() {
	defer c.wg.Done()
	prefix := c.cfg.prefix + "r/"
	var rev int64 // the last revision seen; 0 before the first watch is established
	for attempt := 0; c.ctx.Err() == nil && c.cli.Ctx().Err() == nil; attempt++ {
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify()}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev+1))
		}
		wctx, cancel := context.WithCancel(c.ctx)
		compacted := false
		for resp := range c.cli.Watch(wctx, prefix, opts...) {
			if resp.CompactRevision != 0 {
				compacted = true
				break
			}
			if resp.Err() != nil {
				break
			}
			if resp.Created {
				if rev == 0 {
					rev = resp.Header.Revision
				}
				c.readyOnce.Do(func() { close(c.watchReady) })
				attempt = 0
				continue
			}
			for _, ev := range resp.Events {
				c.onRecall(prefix, ev)
				rev = ev.Kv.ModRevision
			}
		}
		cancel()
		if compacted {
			rev = c.resync(prefix)
		}
		if !c.sleep(min(attempt, 4)) {
			return
		}
	}
}

// resync reads the recall keys afresh after the watch lost its history to a compaction, and
// returns the revision to watch from (0 to start from the present).
func (c *Coordinator) resync(prefix string) int64 {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.reqLimit)
	defer cancel()
	resp, err := c.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0
	}
	c.mu.Lock()
	clear(c.recalls)
	c.mu.Unlock()
	for _, kv := range resp.Kvs {
		c.onRecall(prefix, &clientv3.Event{Type: clientv3.EventTypePut, Kv: kv})
	}
	return resp.Header.Revision
}

// onRecall records a recall key's change and recalls this node's delegation of that key.
func (c *Coordinator) onRecall(prefix string, ev *clientv3.Event) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(string(ev.Kv.Key), prefix))
	if err != nil {
		return // not ours
	}
	k := string(raw)
	c.mu.Lock()
	defer c.mu.Unlock()
	if ev.Type == clientv3.EventTypeDelete {
		delete(c.recalls, k)
		return
	}
	if string(ev.Kv.Value) == c.node {
		return
	}
	c.recalls[k] = ev.Kv.ModRevision
	if d := c.delegs[k]; d != nil {
		if ev.Kv.ModRevision > int64(d.token) {
			c.recallLocked(k, d)
		}
		return
	}
	if _, ok := c.unknown[k]; ok && c.inflight[k] == 0 && !c.closed {
		// A cold Txn of this node failed after it may have landed: look for the orphan.
		delete(c.unknown, k)
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.clearOrphan(k)
		}()
	}
}

// clearOrphan deletes k's delegation if it is on this node's lease but no delegation of this
// node knows it.
func (c *Coordinator) clearOrphan(k string) {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.reqLimit)
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
