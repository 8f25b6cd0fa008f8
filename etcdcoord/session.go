package etcdcoord

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/recordlock/recordlock"
)

// session is the node's etcd lease, which the node's name and every delegation and recall key
// of the node are attached to. It is granted by New and refreshed on demand (no background
// keepalive): an idle node's lease simply expires, which hands its delegations back.
type session struct {
	id clientv3.LeaseID
	// validUntil is the Mono reading until which the lease is known to live, measured from
	// before the grant or keepalive request was sent, less the skew margin. Guarded by c.mu.
	validUntil time.Duration
}

// session returns the node's lease, granted or refreshed so that it lives past need (a Mono
// reading). Lease grants and refreshes are serialized. contended is the caller's, for
// requestErr.
func (c *Coordinator) session(ctx context.Context, need time.Duration, contended bool) (*session, error) {
	select {
	case c.sessLock <- struct{}{}:
	case <-ctx.Done():
		return nil, requestErr(ctx, "wait for the lease", ctx.Err(), contended)
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
		resp, err := c.etcd.KeepAliveOnce(leader(ctx), s.id)
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
			c.mu.Lock()
			c.stats.RefreshFailures++
			c.mu.Unlock()
			return nil, requestErr(ctx, "refresh the lease", err, contended)
		}
	}
	if s == nil {
		var err error
		if s, err = c.grant(ctx, contended); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	valid := s.validUntil
	c.mu.Unlock()
	if need > valid {
		return nil, fmt.Errorf("%w: etcdcoord: etcd granted a lease shorter than asked (TTL %ds less skew %v)",
			recordlock.ErrClusterUnavailable, c.ttlSec, c.cfg.skew)
	}
	return s, nil
}

// grant obtains a new lease and registers the node's name on it: a name held by another live
// lease is refused, since two nodes of one name would take each other's recalls for their own.
func (c *Coordinator) grant(ctx context.Context, contended bool) (*session, error) {
	sent := c.cfg.clock.Mono()
	resp, err := c.etcd.Grant(leader(ctx), c.ttlSec)
	if err != nil {
		return nil, requestErr(ctx, "grant a lease", err, contended)
	}
	s := &session{id: resp.ID, validUntil: sent + time.Duration(resp.TTL)*time.Second - c.cfg.skew}
	nkey := c.nkey()
	reg, err := c.etcd.Txn(leader(ctx), txnReq{
		ifs:  []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(nkey), "=", 0)},
		then: []op{putOp(nkey, c.node, s.id)},
	})
	if err == nil && !reg.Succeeded {
		err = ErrNameTaken
	}
	if err != nil {
		c.revokeLease(s.id)
		if errors.Is(err, ErrNameTaken) {
			return nil, fmt.Errorf("%w: %q", ErrNameTaken, c.node)
		}
		return nil, requestErr(ctx, "register the node's name", err, contended)
	}
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.sess = s
	}
	c.mu.Unlock()
	if closed { // Close has revoked the lease it knew of; this one must not linger either
		c.revokeLease(s.id)
		return nil, errClosed
	}
	return s, nil
}

// revokeLease gives a lease back within the request timeout; if etcd does not answer, it
// expires on its own.
func (c *Coordinator) revokeLease(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(leader(context.Background()), c.cfg.reqLimit)
	defer cancel()
	_ = c.etcd.Revoke(ctx, id)
}

// dropSessionLocked forgets a lease that etcd no longer has: its delegations are gone. Those
// not being handed back have their admissions revoked, and count as lost if etcd let the lease
// go before this node expected (goneLocked); after Close revoked it, they are all being handed
// back.
func (c *Coordinator) dropSessionLocked(s *session) {
	if c.sess == s {
		c.sess = nil
	}
	for k, d := range c.delegs {
		if d.sess == s {
			c.goneLocked(k, d, "the node's etcd lease is gone")
		}
	}
}
