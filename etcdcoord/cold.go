package etcdcoord

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/recordlock/recordlock"
)

// coldResult is what one cold Txn found. All zero: look again at once.
type coldResult struct {
	round    recordlock.Round
	granted  bool
	waitFrom int64 // wait for a change of the key's delegation or recall after this revision
}

// cold runs the one Txn of a cold key and reads its outcome.
func (c *Coordinator) cold(ctx context.Context, a *ask, sess *session, minted, lease time.Duration, revoke func()) (coldResult, error) {
	resp, err := c.coldTxn(ctx, a, sess)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.coldOutcomeLocked(ctx, a, sess, resp, err, minted, lease, revoke)
}

// coldTxn sends the Txn of a cold key: create the delegation if nobody holds it and no other
// node's recall is ahead of this call; otherwise read both keys and, if another node holds the
// delegation and nobody asked yet, write this call's recall key.
func (c *Coordinator) coldTxn(ctx context.Context, a *ask, sess *session) (*clientv3.TxnResponse, error) {
	dkey, rkey := c.dkey(a.k), c.rkey(a.k)
	value := c.recallValue(a, sess)
	turn := clientv3.Compare(clientv3.CreateRevision(rkey), "=", 0)
	then := []op{putOp(dkey, c.node, sess.id)}
	if a.in {
		turn = clientv3.Compare(clientv3.Value(rkey), "=", value)
		then = append(then, deleteOp(rkey))
	}
	askOp := txnOp(
		[]clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(rkey), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(dkey), ">", 0),
			clientv3.Compare(clientv3.LeaseValue(dkey), "!=", sess.id),
		},
		[]op{putOp(rkey, value, sess.id)}, nil)
	return c.etcd.Txn(leader(ctx), txnReq{
		ifs:  []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(dkey), "=", 0), turn},
		then: then,
		els:  []op{getOp(dkey), getOp(rkey), askOp},
	})
}

// coldOutcomeLocked reads what the cold Txn did: a new delegation to admit from, a key held
// elsewhere to wait for, or a race to look at again. Called with c.mu held.
func (c *Coordinator) coldOutcomeLocked(ctx context.Context, a *ask, sess *session, resp *clientv3.TxnResponse, err error,
	minted, lease time.Duration, revoke func()) (coldResult, error) {
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		c.dropSessionLocked(sess) // the lease expired under us: start a new one
		return coldResult{}, nil
	case err != nil:
		// The Txn may have landed: a delegation it created is adopted when the watch reports
		// it, and a recall it wrote is withdrawn when the call ends.
		a.in = true
		return coldResult{}, requestErr(ctx, "create the delegation", err, a.contended)
	case resp.Succeeded:
		a.in = false
		return c.createdLocked(a.k, sess, resp.Header.Revision, minted, lease, revoke), nil
	}
	if nested := resp.Responses[2].GetResponseTxn(); nested != nil && nested.Succeeded {
		a.in = true
		c.stats.RecallsSent++
	}
	dkvs := resp.Responses[0].GetResponseRange().GetKvs()
	rkvs := resp.Responses[1].GetResponseRange().GetKvs()
	if len(rkvs) == 1 && string(rkvs[0].Value) == a.value {
		a.in = true // a recall of this call whose Txn failed after it landed
	}
	switch {
	case len(dkvs) == 0 && len(rkvs) == 0:
		a.in = false // nobody holds it and nobody is queued: a race, look again
		return coldResult{}, nil
	case len(dkvs) == 0 && a.in:
		return coldResult{}, nil // this call's turn: create it
	case len(dkvs) == 1 && dkvs[0].Lease == int64(sess.id):
		// On this node's lease but unknown to it: a Txn of this node whose reply was lost
		// created it, or another node handed it over. Adopt it and look again, unless the
		// watch has already reported that change: it adopted it then, and it has ended since.
		if c.delegs[a.k] == nil && c.sess == sess && !c.closed && c.seen < dkvs[0].ModRevision &&
			!c.endedLocked(a.k, dkvs[0].ModRevision) {
			c.adoptLocked(a.k, dkvs[0].ModRevision, dkvs[0].Value)
		}
		return coldResult{}, nil
	}
	// Another node holds the key, or another node's recall is ahead of this call.
	a.contended = true
	return coldResult{waitFrom: resp.Header.Revision}, nil
}

// createdLocked records the delegation a cold Txn created at revision rev and admits from it,
// unless another node asked for the key before this node could admit. Called with c.mu held.
func (c *Coordinator) createdLocked(k string, sess *session, rev int64, minted, lease time.Duration, revoke func()) coldResult {
	if c.closed || c.sess != sess {
		return coldResult{} // Close or a lost lease hands it back; look again
	}
	d := c.delegs[k]
	switch {
	case d != nil && d.token == uint64(rev): // the watch adopted it before this reply was read
	case c.seen >= rev || c.endedLocked(k, rev) || (d != nil && d.token > uint64(rev)):
		// The watch reported the creation, adopted it, and saw it end before this reply was
		// read, or a later Txn of this node has replaced it: it was handed on or lost. Look
		// again.
		return coldResult{}
	default:
		if d != nil {
			// etcd created the key anew, so the delegation this node knew was deleted before
			// its watch could say so: end its admissions, as the watch would have.
			c.goneLocked(k, d, "replaced in etcd by a later delegation")
		}
		d = newDelegation(k, uint64(rev), sess)
		c.delegs[k] = d
	}
	if d.recalled {
		return coldResult{}
	}
	if r, ok := c.recalls[k]; ok && r.rev > rev {
		c.recallLocked(k, d) // asked for before this node could admit: hand it on
		return coldResult{}
	}
	round, _ := c.admitLocked(d, minted, lease, revoke) // a new delegation has nothing to evict
	return coldResult{round: round, granted: true}
}
