// Package etcdcoord is a recordlock.Coordinator on etcd: it makes cluster-scoped record locks
// exclusive across every node that shares an etcd cluster.
//
// # Delegation
//
// A node obtains a delegation for a key: an etcd key under the prefix, created in one Txn only
// if absent and attached to the node's etcd lease, whose TTL outlasts what the node trusts by a
// skew margin. While the node holds a live, un-recalled delegation with at least the requested
// lease left, Acquire admits with no etcd request at all; a cold key costs one Txn. The lease is
// refreshed on demand, when an admission would outlive what the node trusts of it, so an idle
// node makes no requests and its lease, with every delegation on it, simply expires. A delegation
// that no admission has used for the linger period is handed back by a later Acquire.
//
// # Recall
//
// A node that finds the key delegated elsewhere asks for it back by writing a recall key, which
// the holder watches. The holder stops admitting, revokes every admission whose lease has not
// ended (released ones too, so that a write staged before Release is fenced), waits for them
// to drain, bounded by their deadlines, and deletes the delegation. The asker waits on a watch
// within its own budget and fails with recordlock.ErrTimeout when it runs out. Askers are
// served in turn: while one node's recall is pending, no other node creates the delegation.
//
// # Time and faults
//
// MintedMono is read from the Locker's clock before the request that grants is sent, and a
// round is admitted only if it ends before the node's etcd lease can, so this node's deadline
// always falls before etcd's. The fencing token is the etcd revision that created the
// delegation, strictly increasing per key across the cluster. When etcd cannot be reached within
// the wait, Acquire fails with recordlock.ErrClusterUnavailable, never with a node-local lock. A
// node that dies stops blocking others when its etcd lease expires, about one TTL later.
package etcdcoord

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/recordlock/recordlock"
)

// Coordinator grants cluster rounds from etcd. One Coordinator serves one node, that is one
// Locker's database in one process; its methods are safe for concurrent use. Close it to hand
// its delegations back and stop its background work.
type Coordinator struct {
	cli    *clientv3.Client
	node   string
	cfg    config
	ttlSec int64

	ctx  context.Context // done once Close has handed everything back; owns the goroutines
	stop context.CancelFunc
	wg   sync.WaitGroup

	sessLock   chan struct{} // one slot: one lease grant or refresh at a time
	watchReady chan struct{} // closed once the recall watch is established
	readyOnce  sync.Once

	mu           sync.Mutex
	closed       bool
	watchStarted bool
	sess         *session
	delegs       map[string]*delegation // by key
	recalls      map[string]int64       // key → revision of another node's pending recall
	inflight     map[string]int         // key → cold Txns of this node in flight
	unknown      map[string]struct{}    // keys whose cold Txn failed with an unknown outcome
	lastSweep    time.Duration          // Mono of the last look for idle delegations
}

// New returns a Coordinator for the node named node (unique in the cluster) over client. It
// makes no request: the first cluster lock grants the node's etcd lease and starts the recall
// watch. It fails with an error matching recordlock.ErrInvalidOptions when client is nil, node
// is empty, or the TTL leaves no room for a lease of recordlock.MinLease after the skew.
func New(client *clientv3.Client, node string, opts ...Option) (*Coordinator, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: etcdcoord: client must not be nil", recordlock.ErrInvalidOptions)
	}
	if node == "" {
		return nil, fmt.Errorf("%w: etcdcoord: node must not be empty", recordlock.ErrInvalidOptions)
	}
	cfg := config{
		prefix:   DefaultPrefix,
		clock:    recordlock.SystemClock(),
		ttl:      DefaultTTL,
		skew:     DefaultSkew,
		linger:   DefaultLinger,
		reqLimit: DefaultRequestTimeout,
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	ttlSec := int64((cfg.ttl + time.Second - 1) / time.Second)
	switch {
	case cfg.clock == nil:
		return nil, fmt.Errorf("%w: etcdcoord: WithClock(nil)", recordlock.ErrInvalidOptions)
	case cfg.skew < 0 || cfg.linger < 0 || cfg.reqLimit <= 0:
		return nil, fmt.Errorf("%w: etcdcoord: negative skew or linger, or non-positive request timeout", recordlock.ErrInvalidOptions)
	case time.Duration(ttlSec)*time.Second-cfg.skew < recordlock.MinLease:
		return nil, fmt.Errorf("%w: etcdcoord: TTL %v less skew %v leaves no room for a lease",
			recordlock.ErrInvalidOptions, cfg.ttl, cfg.skew)
	}
	if cfg.stamp == nil {
		cfg.stamp = (&clockStamps{clock: cfg.clock}).mint
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Coordinator{
		cli:        client,
		node:       node,
		cfg:        cfg,
		ttlSec:     ttlSec,
		ctx:        ctx,
		stop:       stop,
		sessLock:   make(chan struct{}, 1),
		watchReady: make(chan struct{}),
		delegs:     map[string]*delegation{},
		recalls:    map[string]int64{},
		inflight:   map[string]int{},
		unknown:    map[string]struct{}{},
	}, nil
}

var errClosed = fmt.Errorf("%w: etcdcoord: coordinator closed", recordlock.ErrClusterUnavailable)

// Acquire admits this node to key for lease. From a live delegation it makes no request; a
// cold key costs one Txn; a key delegated to another node is recalled and waited for. It fails
// with recordlock.ErrTimeout when ctx ends while waiting for another node, with
// recordlock.ErrClusterUnavailable when etcd does not answer (or the lease does not fit the
// node's etcd lease, or the coordinator is closed), and with ctx's error when ctx is cancelled.
func (c *Coordinator) Acquire(ctx context.Context, key []byte, lease time.Duration, revoke func()) (recordlock.Round, error) {
	k := string(key)
	asked := false // this call's recall key is in etcd
	defer func() {
		if asked {
			c.withdraw(k)
		}
	}()
	for {
		if ctx.Err() != nil {
			return recordlock.Round{}, waitErr(ctx, "wait for the key")
		}
		minted := c.cfg.clock.Mono() // before any request of this attempt
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return recordlock.Round{}, errClosed
		}
		if minted-c.lastSweep >= c.cfg.linger {
			c.sweepLocked(minted)
		}
		d := c.delegs[k]
		switch {
		case d == nil:
		case d.recalled:
			gone := d.gone
			c.mu.Unlock()
			if err := c.await(ctx, gone); err != nil {
				return recordlock.Round{}, err
			}
			continue
		case minted+lease <= d.sess.validUntil:
			round := c.admit(d, minted, lease, revoke)
			c.mu.Unlock()
			return round, nil
		}
		c.mu.Unlock()
		sess, err := c.session(ctx, minted+lease)
		if err != nil {
			return recordlock.Round{}, err
		}
		if d != nil {
			continue // the lease was refreshed (or lost, and the delegation with it): look again
		}
		r, err := c.cold(ctx, k, sess, minted, lease, revoke, &asked)
		switch {
		case err != nil:
			return recordlock.Round{}, err
		case r.granted:
			return r.round, nil
		case r.orphan != 0:
			if err := c.deleteOrphan(ctx, k, r.orphan); err != nil {
				return recordlock.Round{}, err
			}
		case r.waitFrom != 0:
			if err := c.awaitChange(ctx, k, r.waitFrom); err != nil {
				return recordlock.Round{}, err
			}
		}
	}
}

// coldResult is what one cold Txn found.
type coldResult struct {
	round    recordlock.Round
	granted  bool
	waitFrom int64 // wait for a change of the key's delegation or recall after this revision
	orphan   int64 // create revision of a delegation of ours that this node lost track of
}

// cold runs the one Txn of a cold key: create the delegation if nobody holds it and no other
// node's recall is ahead of this one; otherwise read both keys and, if another node holds the
// delegation and nobody asked yet, write this node's recall key.
func (c *Coordinator) cold(ctx context.Context, k string, sess *session, minted, lease time.Duration, revoke func(), asked *bool) (coldResult, error) {
	dkey, rkey := c.dkey(k), c.rkey(k)
	turn := clientv3.Compare(clientv3.CreateRevision(rkey), "=", 0)
	then := []clientv3.Op{clientv3.OpPut(dkey, c.node, clientv3.WithLease(sess.id))}
	if *asked {
		turn = clientv3.Compare(clientv3.Value(rkey), "=", c.node)
		then = append(then, clientv3.OpDelete(rkey))
	}
	ask := clientv3.OpTxn(
		[]clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(rkey), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(dkey), ">", 0),
			clientv3.Compare(clientv3.LeaseValue(dkey), "!=", sess.id),
		},
		[]clientv3.Op{clientv3.OpPut(rkey, c.node, clientv3.WithLease(sess.id))}, nil)

	c.mu.Lock()
	c.inflight[k]++
	c.mu.Unlock()
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(dkey), "=", 0), turn).
		Then(then...).
		Else(clientv3.OpGet(dkey), clientv3.OpGet(rkey), ask).
		Commit()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inflight[k]--; c.inflight[k] == 0 {
		delete(c.inflight, k)
	}
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		c.dropSessionLocked(sess) // the lease expired under us: start a new one
		return coldResult{}, nil
	case err != nil:
		c.unknown[k] = struct{}{} // the Txn may have landed; a recall of k will clear it up
		return coldResult{}, requestErr(ctx, "create the delegation", err)
	case resp.Succeeded:
		*asked = false
		delete(c.unknown, k)
		if c.closed || c.sess != sess {
			return coldResult{}, nil // Close or a lost lease hands it back; look again
		}
		d := &delegation{token: uint64(resp.Header.Revision), sess: sess, gone: make(chan struct{})}
		c.delegs[k] = d
		if rev, ok := c.recalls[k]; ok && rev > resp.Header.Revision {
			c.recallLocked(k, d) // asked for before this node could admit: hand it on
			return coldResult{}, nil
		}
		return coldResult{round: c.admit(d, minted, lease, revoke), granted: true}, nil
	}
	if nested := resp.Responses[2].GetResponseTxn(); nested != nil && nested.Succeeded {
		*asked = true
	}
	if len(resp.Responses[0].GetResponseRange().GetKvs()) == 0 {
		// Nobody holds it, so a recall is ahead of this call's turn. If that recall is this
		// node's own, or gone (this call's went with a lost lease), try again at once.
		rkvs := resp.Responses[1].GetResponseRange().GetKvs()
		switch {
		case len(rkvs) == 0:
			*asked = false
			return coldResult{}, nil
		case string(rkvs[0].Value) == c.node && !*asked:
			*asked = true
			return coldResult{}, nil
		}
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 && kvs[0].Lease == int64(sess.id) {
		if c.delegs[k] == nil && c.inflight[k] == 0 {
			return coldResult{orphan: kvs[0].CreateRevision}, nil
		}
		return coldResult{}, nil // another call of this node just created it: look again
	}
	return coldResult{waitFrom: resp.Header.Revision}, nil
}

// deleteOrphan hands back a delegation of this node that no admission uses: one whose creating
// Txn timed out after it landed. The revision check makes sure it deletes nothing newer.
func (c *Coordinator) deleteOrphan(ctx context.Context, k string, createRev int64) error {
	dkey := c.dkey(k)
	_, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(dkey), "=", createRev)).
		Then(clientv3.OpDelete(dkey)).
		Commit()
	if err != nil {
		return requestErr(ctx, "hand back a stale delegation", err)
	}
	return nil
}

// await waits for ch to close within ctx.
func (c *Coordinator) await(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return waitErr(ctx, "wait for this node's recall to finish")
	case <-c.ctx.Done():
		return errClosed
	}
}

// awaitChange waits until the key's delegation or recall key changes after revision rev.
func (c *Coordinator) awaitChange(ctx context.Context, k string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dch := c.cli.Watch(wctx, c.dkey(k), clientv3.WithRev(rev+1))
	rch := c.cli.Watch(wctx, c.rkey(k), clientv3.WithRev(rev+1))
	select {
	case <-dch:
	case <-rch:
	case <-ctx.Done():
	case <-c.ctx.Done():
		return errClosed
	}
	if ctx.Err() != nil {
		return waitErr(ctx, "wait for another node to hand the key back")
	}
	return nil
}

// withdraw deletes this node's recall key of k after a call that wrote it gave up, so that the
// nodes queued behind it are not held up.
func (c *Coordinator) withdraw(k string) {
	rkey := c.rkey(k)
	c.background(func() {
		for attempt := range 3 {
			ctx, cancel := context.WithTimeout(c.ctx, c.cfg.reqLimit)
			_, err := c.cli.Txn(ctx).
				If(clientv3.Compare(clientv3.Value(rkey), "=", c.node)).
				Then(clientv3.OpDelete(rkey)).
				Commit()
			cancel()
			if err == nil || !c.sleep(attempt) {
				return
			}
		}
	})
}

// background runs f in a goroutine that Close waits for; after Close it does nothing, since
// revoking the lease removes every key of this node.
func (c *Coordinator) background(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.backgroundLocked(f)
}

// backgroundLocked is background called with c.mu held.
func (c *Coordinator) backgroundLocked(f func()) {
	if c.closed {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}

// sleep backs off before a retry of a background request; false once the coordinator closes.
// Retries of network requests run on real time: they bound I/O, not leases.
func (c *Coordinator) sleep(attempt int) bool {
	t := time.NewTimer(min(100*time.Millisecond<<attempt, 2*time.Second))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// Close revokes every admission whose lease has not ended, hands back every delegation at once
// by revoking the node's etcd lease, and stops the recall watch. Acquire then fails with
// recordlock.ErrClusterUnavailable. If etcd cannot be reached within the request timeout, the
// delegations lapse with the lease, about one TTL later, and Close returns an error matching
// recordlock.ErrClusterUnavailable. Close is idempotent.
func (c *Coordinator) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	now := c.cfg.clock.Mono()
	var revokes []func()
	for _, d := range c.delegs {
		d.recalled = true
		revokes = append(revokes, d.unended(now)...)
	}
	sess := c.sess
	c.mu.Unlock()
	for _, revoke := range revokes {
		revoke()
	}
	var err error
	if sess != nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.reqLimit)
		_, err = c.cli.Revoke(ctx, sess.id)
		cancel()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			err = nil
		}
	}
	c.stop()
	c.wg.Wait()
	c.mu.Lock()
	for k, d := range c.delegs {
		d.end()
		delete(c.delegs, k)
	}
	c.sess = nil
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: etcdcoord: hand back the delegations: %w", recordlock.ErrClusterUnavailable, err)
	}
	return nil
}

func (c *Coordinator) dkey(k string) string { return c.cfg.prefix + "d/" + encode(k) }
func (c *Coordinator) rkey(k string) string { return c.cfg.prefix + "r/" + encode(k) }

// encode makes a key safe to put under the prefix: no separator, no prefix of another key.
func encode(k string) string { return base64.RawURLEncoding.EncodeToString([]byte(k)) }

// requestErr maps a failed etcd request. A caller who cancelled gets their ctx error back; a
// request that failed, or that etcd did not answer before the wait ran out, is
// ErrClusterUnavailable (with the caller's deadline error, if that was what ran out).
func requestErr(ctx context.Context, what string, err error) error {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, context.Canceled):
		return fmt.Errorf("etcdcoord: %s: %w", what, ctx.Err())
	case errors.Is(cause, context.DeadlineExceeded):
		return fmt.Errorf("%w: etcdcoord: %s: %w", recordlock.ErrClusterUnavailable, what, cause)
	}
	return fmt.Errorf("%w: etcdcoord: %s: %w", recordlock.ErrClusterUnavailable, what, err)
}

// waitErr is the error of a wait for another node that ctx ended: ErrTimeout when the wait ran
// out, ctx's error when the caller cancelled.
func waitErr(ctx context.Context, what string) error {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, context.Canceled):
		return fmt.Errorf("etcdcoord: %s: %w", what, ctx.Err())
	case errors.Is(cause, recordlock.ErrTimeout):
		return fmt.Errorf("%w: etcdcoord: %s", recordlock.ErrTimeout, what)
	default:
		return fmt.Errorf("%w: etcdcoord: %s: %w", recordlock.ErrTimeout, what, cause)
	}
}
