package etcdcoord

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/recordlock/recordlock"
)

// Acquire: a round from a live delegation, a cold Txn, or a wait for another node.

// Acquire admits this node to the record req names, in its mode, for req.Lease. From a live
// delegation that admits the mode it makes no request; a cold record costs one Txn; a record
// held elsewhere in a conflicting mode is recalled and waited for. It fails with
// recordlock.ErrInvalidOptions when the lease is longer than the TTL less the skew; with
// recordlock.ErrTimeout when ctx ends while waiting for another node; with
// recordlock.ErrClusterUnavailable when etcd does not answer or the watch is not established
// (or the coordinator is closed); and with ctx's error when ctx is cancelled.
func (c *Coordinator) Acquire(ctx context.Context, req recordlock.Request) (recordlock.Round, error) {
	if req.Lease > c.maxLease {
		return recordlock.Round{}, fmt.Errorf("%w: etcdcoord: lease %v is longer than the TTL %ds less the skew %v",
			recordlock.ErrInvalidOptions, req.Lease, c.ttlSec, c.cfg.skew)
	}
	id := recordID(req.ColumnFamily, req.Key)
	var a *ask // made by the first wait: the repeat path allocates nothing for it
	// cw: the call of a Txn that may wait for another node, made with a (deadlock.go)
	var cw *crossWaiter
	defer func() {
		if a != nil {
			c.endAsk(a)
		}
		if a != nil && a.in {
			c.withdraw(a)
		}
	}()
	var err error
	if req.Txn.ID != 0 {
		defer func() { // before the withdrawal: a wait that went away goes first
			if cw != nil {
				c.endCrossWait(cw, err != nil)
			}
		}()
	}
	round, err := c.acquire(ctx, &req, id, &a, &cw)
	return round, err
}

// acquire is Acquire's loop. a and cw are made as the first cold attempt needs them.
func (c *Coordinator) acquire(ctx context.Context, reqp *recordlock.Request, id string, ap **ask, cwp **crossWaiter) (recordlock.Round, error) {
	req := *reqp
	var a *ask
	defer func() { *ap = a }()
	var minted time.Duration
	refreshed := false // the lease was refreshed to cover minted+lease: admit on that reading
	// waited: the call has waited for this node's recall of the key to end, a wait for holders
	// of the key like a wait for another node (ask.contended); a deadline that cuts a request
	// short from then on is that wait running out, not etcd failing (requestErr)
	waited := false
	for {
		if ctx.Err() != nil {
			return recordlock.Round{}, waitErr(ctx, "wait for the key")
		}
		// A refresh measures the lease from when it was sent, after minted; a fresh reading
		// could ask for more than it covered, and refresh again, without end.
		if !refreshed {
			minted = c.cfg.clock.Mono() // before any request of this attempt
		}
		renewed := refreshed
		refreshed = false
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return recordlock.Round{}, errClosed
		}
		if minted-c.lastSweep >= c.cfg.linger {
			c.sweepLocked(minted)
		}
		d := c.delegs[id]
		var own *delegation // this node's shared delegation, which a writer turns exclusive
		switch {
		case !c.watching:
			up := c.up
			c.mu.Unlock()
			if err := c.awaitWatch(ctx, up); err != nil {
				return recordlock.Round{}, err
			}
			continue
		case d == nil:
		case d.recalled, !req.Shared && d.sharing, d.held != nil && !(a != nil && d.honored != "" && d.honored == a.value):
			// Handed back, or turning shared for a reader elsewhere: a writer waits for either.
			// Asked for while another call it was granted for is still to be admitted: wait
			// for that call, so that nothing new passes the recall.
			wait := d.gone
			switch {
			case d.held != nil && !d.recalled && !d.sharing:
				wait = d.held
			case !d.recalled:
				wait = d.settled
			}
			sess := c.sess
			c.mu.Unlock()
			if req.Txn.ID != 0 && sess != nil { // a wait for another node's request
				if a == nil {
					a = c.newAsk(id, &req, cwp)
				}
				c.publishWait(ctx, *cwp, c.waitValue(a, sess, &req), sess)
			}
			if c.cfg.recallWaitLag != nil {
				c.cfg.recallWaitLag()
			}
			if err := c.await(ctx, wait, *cwp); err != nil {
				return recordlock.Round{}, err
			}
			waited = true
			continue
		case !req.Shared && d.shared:
			own = d
		case minted+req.Lease <= d.sess.validUntil:
			forThisCall := a != nil && d.honored != "" && d.honored == a.value
			if forThisCall {
				a.in = false // the holder handed the key to this call and deleted its recall
				d.forCall = false
			}
			round, evict := c.admitLocked(d, &req, minted)
			if forThisCall {
				c.recheckRecallLocked(id, d) // one that came after the hand-over starts now
			}
			c.mu.Unlock()
			if evict != nil {
				go evict() // it may wait for another handle's Fence; this lock must not
			}
			return round, nil
		}
		c.mu.Unlock()
		admits := d != nil && own == nil // d admits once the lease covers the round
		if admits && renewed {
			// Every delegation is on the node's current lease, which the refresh made cover
			// minted+lease. Should that ever not hold, fail rather than refresh twice in a row:
			// that is the bound on an Acquire's refreshes.
			return recordlock.Round{}, fmt.Errorf("%w: etcdcoord: the refreshed lease does not cover the round",
				recordlock.ErrClusterUnavailable)
		}
		sess, err := c.session(ctx, minted+req.Lease, waited || (a != nil && a.contended))
		if err != nil {
			return recordlock.Round{}, err
		}
		if admits {
			refreshed = true
			continue // the lease was refreshed (or lost, and the delegation with it): look again
		}
		if a == nil {
			a = c.newAsk(id, &req, cwp)
		}
		a.contended = a.contended || waited
		w := c.addWaiter(a.k)
		r, err := c.cold(ctx, a, *cwp, own, sess, &req, minted)
		if err == nil && r.waitFrom != 0 {
			err = c.awaitChange(ctx, w, r.waitFrom, *cwp)
			if err == nil && c.cfg.changeLag != nil {
				c.cfg.changeLag()
			}
		}
		c.removeWaiter(a.k, w)
		switch {
		case err != nil:
			return recordlock.Round{}, err
		case r.granted:
			return r.round, nil
		}
	}
}

// awaitWatch waits for the watch to be established. A wait that runs out is
// ErrClusterUnavailable: without the watch no recall can be seen, so etcd is what is missing.
func (c *Coordinator) awaitWatch(ctx context.Context, up <-chan struct{}) error {
	select {
	case <-up:
		return nil
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), context.Canceled) {
			return fmt.Errorf("etcdcoord: wait for the watch: %w", ctx.Err())
		}
		return fmt.Errorf("%w: etcdcoord: the watch on etcd is not established", recordlock.ErrClusterUnavailable)
	case <-c.ctx.Done():
		return errClosed
	case <-c.etcd.Closed():
		return fmt.Errorf("%w: etcdcoord: the etcd client is closed", recordlock.ErrClusterUnavailable)
	}
}

// newAsk makes the call's ask of record id and, for a Txn, registers the call as one that may
// wait for another node (*cwp).
func (c *Coordinator) newAsk(id string, req *recordlock.Request, cwp **crossWaiter) *ask {
	a := &ask{k: id, shared: req.Shared}
	if req.Txn.ID != 0 && *cwp == nil {
		c.mu.Lock()
		*cwp = c.addCrossWaiterLocked(a, req)
		c.mu.Unlock()
	}
	return a
}

// victim is closed when cw's call is a deadlock's victim; nil for no call.
func (cw *crossWaiter) victimCh() <-chan struct{} {
	if cw == nil {
		return nil
	}
	return cw.victim
}

// await waits for ch to close within ctx, unless cw's call is a deadlock's victim first.
func (c *Coordinator) await(ctx context.Context, ch <-chan struct{}, cw *crossWaiter) error {
	select {
	case <-ch:
		return nil
	case <-cw.victimCh():
		return c.victimErr(cw)
	case <-ctx.Done():
		return waitErr(ctx, "wait for this node's recall to finish")
	case <-c.ctx.Done():
		return errClosed
	}
}
