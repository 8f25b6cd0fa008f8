package etcdcoord

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/recordlock/recordlock"
)

// coldResult is what one cold Txn found. All zero: look again at once.
type coldResult struct {
	round    recordlock.Round
	granted  bool
	waitFrom int64 // wait for a change of the record's delegations or recall after this revision
}

// cold runs the one Txn of a record this node has no delegation of that admits req, and reads
// its outcome. own, if not nil, is this node's shared delegation of it, which an exclusive
// request turns exclusive.
// cw, if not nil, is the call of a Txn: a Txn that finds the record held elsewhere publishes its
// wait in the same Txn (deadlock.go), and one that creates it deletes its wait.
func (c *Coordinator) cold(ctx context.Context, a *ask, cw *crossWaiter, own *delegation, sess *session, req *recordlock.Request,
	minted time.Duration) (coldResult, error) {
	target := c.xkey(a.k)
	if a.shared {
		target = c.skey(a.k, sess.id)
	}
	var value string
	if cw != nil {
		value = c.waitValue(a, sess, req)
	}
	asked := c.recallValue(a, sess)
	c.mu.Lock()
	if own != nil && (c.delegs[a.k] != own || !own.shared) {
		// The watch ended own, or switched it to the exclusive key an earlier Txn of this node
		// put, while the call refreshed the lease: look again rather than turn a key into itself.
		c.mu.Unlock()
		return coldResult{}, nil
	}
	c.liveAsks[asked] = true
	ownKey, ownToken := "", uint64(0)
	if own != nil {
		ownKey, ownToken = own.key, own.token
		own.next = target
	}
	c.creating[a.k]++
	var wait *waitOps // cw's wait: put if the Txn finds the record held, deleted if it creates it
	if cw != nil {
		wait = &waitOps{del: deleteOp(cw.key)}
		// Published once on each lease: its ModRevision says when the wait began. A wait put on
		// a lease that has ended went with it, and is put again on the new one.
		if !cw.sent || cw.on != sess {
			put := putOp(cw.key, value, sess.id)
			wait.put = &put
			cw.value, cw.on = value, sess
		}
		cw.sent = true // the Txn may publish it
	}
	c.mu.Unlock()
	resp, err := c.coldTxn(ctx, a, sess, target, ownKey, ownToken, wait)
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.createdOrNotLocked(a.k)
	if cw != nil && err == nil && resp.Succeeded {
		cw.sent = false // it created the record, and deleted its wait
	}
	return c.coldOutcomeLocked(ctx, a, own, sess, target, resp, err, req, minted)
}

// createdOrNotLocked follows the reply of a cold Txn for record k: once no reply of this node's
// cold Txns for k is pending, a recall that arrived meanwhile starts, after the call the Txn
// may have granted was admitted. Called with c.mu held.
func (c *Coordinator) createdOrNotLocked(k string) {
	if c.creating[k]--; c.creating[k] > 0 {
		return
	}
	delete(c.creating, k)
	if d := c.delegs[k]; d != nil {
		c.recheckRecallLocked(k, d)
	}
}

// recheckRecallLocked starts what another node's pending recall of k asks of d, if it came
// after d's grant: for a recall deferred while this node's call d was granted for had not been
// admitted yet. Called with c.mu held.
func (c *Coordinator) recheckRecallLocked(k string, d *delegation) {
	if r, ok := c.recalls[k]; ok && r.rev > int64(d.token) {
		c.askedLocked(k, d)
		return
	}
	d.unhold()
}

// endAsk forgets a's call as it returns. A delegation handed over to it that it did not admit
// from (it gave up first) no longer waits for it: a recall deferred for it starts.
func (c *Coordinator) endAsk(a *ask) {
	if a.value == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.liveAsks, a.value)
	if d := c.delegs[a.k]; d != nil && d.forCall && d.honored == a.value {
		d.forCall = false
		c.recheckRecallLocked(a.k, d)
	}
}

// coldTxn sends the Txn of a cold record. A shared request creates this node's shared key if no
// exclusive key exists; an exclusive one creates the exclusive key if no other node's shared key
// exists either, deleting this node's own shared key (ownKey, at ownToken) if it has one. Either
// waits its turn: only if no other node's recall is pending. Otherwise it reads the record's keys
// and, if a holder in a conflicting mode exists and nobody asked yet, writes this call's recall.
// waitOps are the ops of a Txn's cross wait in a cold Txn.
type waitOps struct {
	put *op // nil once published
	del op
}

func (c *Coordinator) coldTxn(ctx context.Context, a *ask, sess *session, target, ownKey string, ownToken uint64, wait *waitOps) (*clientv3.TxnResponse, error) {
	xkey, rkey := c.xkey(a.k), c.rkey(a.k)
	from, to := c.shared(a.k)
	mine := c.skey(a.k, sess.id)
	value := c.recallValue(a, sess)
	turn := clientv3.Compare(clientv3.CreateRevision(rkey), "=", 0)
	var then []op
	if a.in {
		turn = clientv3.Compare(clientv3.Value(rkey), "=", value)
		then = append(then, deleteOp(rkey))
	}
	ifs := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(xkey), "=", 0), turn}
	askIfs := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(rkey), "=", 0),
		clientv3.Compare(clientv3.LeaseValue(xkey), "!=", sess.id),
	}
	switch {
	case a.shared:
		ifs = append(ifs, clientv3.Compare(clientv3.CreateRevision(mine), "=", 0))
		askIfs = append(askIfs, clientv3.Compare(clientv3.CreateRevision(xkey), ">", 0)) // readers recall writers only
	case ownKey != "":
		ifs = append(ifs, noneIn(from, mine), noneIn(mine+"\x00", to),
			clientv3.Compare(clientv3.ModRevision(ownKey), "=", int64(ownToken)))
		then = append(then, deleteOp(ownKey))
	default:
		ifs = append(ifs, noneIn(from, to))
	}
	then = append(then, putOp(target, c.node, sess.id))
	els := []op{getOp(xkey), getRangeOp(from, to), getOp(rkey), txnOp(askIfs, []op{putOp(rkey, value, sess.id)}, nil)}
	if wait != nil {
		then = append(then, wait.del)
		if wait.put != nil {
			els = append(els, *wait.put)
		}
	}
	return c.etcd.Txn(leader(ctx), txnReq{ifs: ifs, then: then, els: els})
}

// coldOutcomeLocked reads what the cold Txn did: a delegation to admit from, a record held
// elsewhere to wait for, or a race to look at again. Called with c.mu held.
func (c *Coordinator) coldOutcomeLocked(ctx context.Context, a *ask, own *delegation, sess *session, target string,
	resp *clientv3.TxnResponse, err error, req *recordlock.Request, minted time.Duration) (coldResult, error) {
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
		return c.createdLocked(a, own, sess, target, resp.Header.Revision, req, minted), nil
	}
	if nested := resp.Responses[3].GetResponseTxn(); nested != nil && nested.Succeeded {
		a.in = true
		c.stats.RecallsSent++
	}
	xkvs := resp.Responses[0].GetResponseRange().GetKvs()
	skvs := resp.Responses[1].GetResponseRange().GetKvs()
	rkvs := resp.Responses[2].GetResponseRange().GetKvs()
	if len(rkvs) == 1 && string(rkvs[0].Value) == a.value {
		a.in = true // a recall of this call whose Txn failed after it landed
	}
	var mineKV *mvccpb.KeyValue // a delegation of this record on this node's lease
	others := 0                 // other nodes' shared delegations
	if len(xkvs) == 1 && xkvs[0].Lease == int64(sess.id) {
		mineKV = xkvs[0]
	}
	for _, kv := range skvs {
		if kv.Lease == int64(sess.id) {
			mineKV = kv
		} else {
			others++
		}
	}
	if mineKV != nil {
		d := c.delegs[a.k]
		known := d != nil && d.key == string(mineKV.Key) && d.token == uint64(mineKV.ModRevision)
		if !known {
			// On this node's lease but unknown to it: a Txn of this node whose reply was lost
			// created it, or another node handed it over. Adopt it and look again, unless the
			// watch has already reported that change: it adopted it then, and it has ended since.
			if d == nil && c.sess == sess && !c.closed && c.seen < mineKV.ModRevision &&
				!c.endedLocked(a.k, mineKV.ModRevision) {
				kind, _, _ := c.parse(mineKV.Key)
				c.adoptLocked(a.k, string(mineKV.Key), kind == 's', mineKV.ModRevision, mineKV.Value)
			}
			return coldResult{}, nil
		}
		if a.shared || !d.shared {
			return coldResult{}, nil // it admits this request now: look again
		}
	}
	free := len(xkvs) == 0 && (a.shared || others == 0) // nothing in the way but the turn
	switch {
	case free && len(rkvs) == 0:
		a.in = false // nobody holds it and nobody is queued: a race, look again
		return coldResult{}, nil
	case free && a.in:
		return coldResult{}, nil // this call's turn: create it
	}
	// A holder in a conflicting mode, or another node's recall ahead of this call.
	a.contended = true
	return coldResult{waitFrom: resp.Header.Revision}, nil
}

// createdLocked records the delegation a cold Txn created at revision rev (or turned exclusive:
// own) and admits from it, unless another node asked for the record in a conflicting mode
// before this node could admit. Called with c.mu held.
func (c *Coordinator) createdLocked(a *ask, own *delegation, sess *session, target string, rev int64,
	req *recordlock.Request, minted time.Duration) coldResult {
	if c.closed || c.sess != sess {
		return coldResult{} // Close or a lost lease hands it back; look again
	}
	d := c.delegs[a.k]
	switch {
	case d != nil && d.token == uint64(rev): // the watch adopted or switched it before this reply was read
	case own != nil && d == own && !own.ended && own.token < uint64(rev):
		c.switchLocked(own, target, rev)
	case c.seen >= rev || c.endedLocked(a.k, rev) || (d != nil && d.token > uint64(rev)):
		// The watch reported the creation, adopted it, and saw it end before this reply was
		// read, or a later Txn of this node has replaced it: it was handed on or lost. Look
		// again.
		return coldResult{}
	default:
		if d != nil {
			// etcd created the key anew, so the delegation this node knew was deleted before
			// its watch could say so: end its admissions, as the watch would have.
			c.goneLocked(a.k, d, "replaced in etcd by a later delegation")
		}
		d = newDelegation(a.k, target, a.shared, uint64(rev), sess)
		c.delegs[a.k] = d
	}
	if r, ok := c.recalls[a.k]; ok && r.rev > rev {
		c.askedLocked(a.k, d) // asked for before this node could admit
	}
	if d.recalled || (!a.shared && (d.sharing || d.shared)) {
		return coldResult{}
	}
	round, evict := c.admitLocked(d, req, minted) // a new delegation has nothing to evict
	if evict != nil {
		go evict()
	}
	return coldResult{round: round, granted: true}
}
