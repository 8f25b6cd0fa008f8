package etcdcoord

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/recordlock/recordlock"
)

// Coordinator grants cluster rounds from etcd. One Coordinator serves one node, that is one
// Locker's database in one process; its methods are safe for concurrent use. Close it to hand
// its delegations back and stop its background work.
type Coordinator struct {
	// Set by New and never changed.
	etcd     etcdAPI
	node     string
	cfg      config
	log      *slog.Logger
	ttlSec   int64
	maxLease time.Duration // the longest round the node's etcd lease can cover: TTL less skew

	ctx  context.Context // done once Close has handed everything back; owns the goroutines
	stop context.CancelFunc
	wg   sync.WaitGroup

	sessLock chan struct{} // one slot: one lease grant or refresh at a time
	seq      atomic.Uint64 // makes each Acquire's recall value unique

	mu       sync.Mutex // guards everything below
	closed   bool
	sess     *session
	watching bool                   // the watch is established and the state below is caught up
	up       chan struct{}          // closed when watching becomes true; replaced when it breaks
	seen     int64                  // the latest revision the watch applied: every change up to it is reflected here
	delegs   map[string]*delegation // by key
	// ended maps a key to the token of this node's latest delegation of it that ended before the
	// watch applied its grant: a late report of that grant must not bring it back (ended.go)
	ended     map[string]int64
	recalls   map[string]recall    // key → another node's pending recall
	waiters   map[string][]*waiter // key → Acquire calls waiting for its etcd keys to change
	lastSweep time.Duration        // Mono of the last look for idle delegations
	stats     Stats                // counters; Delegations and Retained are computed by Stats
}

// New returns a Coordinator for the node named node over client. It grants the node's etcd
// lease, registers the name on it and starts the watch, within the request timeout. It fails
// with an error matching recordlock.ErrInvalidOptions when client is nil, node is empty, or the
// TTL leaves no room for a lease of recordlock.MinLease after the skew; with an error matching
// ErrNameTaken when another live coordinator has the same name; and with one matching
// recordlock.ErrClusterUnavailable when etcd does not answer.
func New(client *clientv3.Client, node string, opts ...Option) (*Coordinator, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: etcdcoord: client must not be nil", recordlock.ErrInvalidOptions)
	}
	return newCoordinator(clientEtcd{client}, node, opts...)
}

// newCoordinator is New over any etcdAPI: the tests' simulated etcd is one.
func newCoordinator(etcd etcdAPI, node string, opts ...Option) (*Coordinator, error) {
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
	maxLease := time.Duration(ttlSec)*time.Second - cfg.skew
	switch {
	case cfg.clock == nil:
		return nil, fmt.Errorf("%w: etcdcoord: WithClock(nil)", recordlock.ErrInvalidOptions)
	case cfg.skew < 0 || cfg.linger < 0 || cfg.reqLimit <= 0:
		return nil, fmt.Errorf("%w: etcdcoord: negative skew or linger, or non-positive request timeout", recordlock.ErrInvalidOptions)
	case maxLease < recordlock.MinLease:
		return nil, fmt.Errorf("%w: etcdcoord: TTL %v less skew %v leaves no room for a lease",
			recordlock.ErrInvalidOptions, cfg.ttl, cfg.skew)
	}
	if cfg.stamp == nil {
		cfg.stamp = (&clockStamps{clock: cfg.clock}).mint
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	ctx, stop := context.WithCancel(context.Background())
	c := &Coordinator{
		etcd:     etcd,
		node:     node,
		cfg:      cfg,
		log:      cfg.log.With("node", node),
		ttlSec:   ttlSec,
		maxLease: maxLease,
		ctx:      ctx,
		stop:     stop,
		sessLock: make(chan struct{}, 1),
		up:       make(chan struct{}),
		delegs:   map[string]*delegation{},
		ended:    map[string]int64{},
		recalls:  map[string]recall{},
		waiters:  map[string][]*waiter{},
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.reqLimit)
	_, err := c.session(rctx, 0)
	cancel()
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	c.wg.Add(1)
	go c.watch()
	return c, nil
}

var errClosed = fmt.Errorf("%w: etcdcoord: coordinator closed", recordlock.ErrClusterUnavailable)

// leader makes a request or watch fail fast on a member that has lost the quorum's leader.
func leader(ctx context.Context) context.Context { return clientv3.WithRequireLeader(ctx) }

// Acquire admits this node to key for lease. From a live delegation it makes no request; a
// cold key costs one Txn; a key delegated to another node is recalled and waited for. It fails
// with recordlock.ErrInvalidOptions when lease is longer than the TTL less the skew; with
// recordlock.ErrTimeout when ctx ends while waiting for another node; with
// recordlock.ErrClusterUnavailable when etcd does not answer or the watch is not established
// (or the coordinator is closed); and with ctx's error when ctx is cancelled.
func (c *Coordinator) Acquire(ctx context.Context, key []byte, lease time.Duration, revoke func()) (recordlock.Round, error) {
	if lease > c.maxLease {
		return recordlock.Round{}, fmt.Errorf("%w: etcdcoord: lease %v is longer than the TTL %ds less the skew %v",
			recordlock.ErrInvalidOptions, lease, c.ttlSec, c.cfg.skew)
	}
	var a *ask // made by the first cold attempt: the repeat path allocates nothing for it
	defer func() {
		if a != nil && a.in {
			c.withdraw(a)
		}
	}()
	var minted time.Duration
	refreshed := false // the lease was refreshed to cover minted+lease: admit on that reading
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
		d := c.delegs[string(key)]
		switch {
		case !c.watching:
			up := c.up
			c.mu.Unlock()
			if err := c.awaitWatch(ctx, up); err != nil {
				return recordlock.Round{}, err
			}
			continue
		case d == nil:
		case d.recalled:
			gone := d.gone
			c.mu.Unlock()
			if err := c.await(ctx, gone); err != nil {
				return recordlock.Round{}, err
			}
			continue
		case minted+lease <= d.sess.validUntil:
			if a != nil && d.honored != "" && d.honored == a.value {
				a.in = false // the holder handed the key to this call and deleted its recall
			}
			round, evicted := c.admitLocked(d, minted, lease, revoke)
			c.mu.Unlock()
			if evicted != nil {
				evicted()
			}
			return round, nil
		}
		c.mu.Unlock()
		if d != nil && renewed {
			// Every delegation is on the node's current lease, which the refresh made cover
			// minted+lease. Should that ever not hold, fail rather than refresh twice in a row:
			// that is the bound on an Acquire's refreshes.
			return recordlock.Round{}, fmt.Errorf("%w: etcdcoord: the refreshed lease does not cover the round",
				recordlock.ErrClusterUnavailable)
		}
		sess, err := c.session(ctx, minted+lease)
		if err != nil {
			return recordlock.Round{}, err
		}
		if d != nil {
			refreshed = true
			continue // the lease was refreshed (or lost, and the delegation with it): look again
		}
		if a == nil {
			a = &ask{k: string(key)}
		}
		w := c.addWaiter(a.k)
		r, err := c.cold(ctx, a, sess, minted, lease, revoke)
		if err == nil && r.waitFrom != 0 {
			err = c.awaitChange(ctx, w, r.waitFrom)
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

// background runs f in a goroutine that Close waits for; after Close it does nothing, since
// revoking the lease removes every key of this node, and reports false.
func (c *Coordinator) background(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.backgroundLocked(f)
}

// backgroundLocked is background called with c.mu held.
func (c *Coordinator) backgroundLocked(f func()) bool {
	if c.closed {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

// sleep backs off before a retry of a background request; false once the coordinator closes.
// Retries of network requests run on real time: they bound I/O, not leases.
func (c *Coordinator) sleep(attempt int) bool {
	t := time.NewTimer(min(50*time.Millisecond<<attempt, 2*time.Second))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// Close revokes every admission whose lease has not ended, hands back every delegation at once
// by revoking the node's etcd lease, and stops the watch. Acquire then fails with
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
	var revokes []func()
	for _, d := range c.delegs {
		d.recalled = true
		// Revoking the lease below deletes its key: the watch must take that for a hand-back.
		d.handingBack = true
		revokes = append(revokes, d.takeAll()...)
	}
	sess := c.sess
	c.mu.Unlock()
	for _, revoke := range revokes {
		revoke()
	}
	var err error
	if sess != nil {
		ctx, cancel := context.WithTimeout(leader(context.Background()), c.cfg.reqLimit)
		err = c.etcd.Revoke(ctx, sess.id)
		cancel()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			err = nil
		}
	}
	c.stop()
	c.wg.Wait()
	c.mu.Lock()
	for k, d := range c.delegs {
		if err == nil {
			c.handedBackLocked(k, d)
		} else { // left to lapse with the lease: neither handed back nor lost
			d.end()
			delete(c.delegs, k)
		}
	}
	c.sess = nil
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: etcdcoord: hand back the delegations: %w", recordlock.ErrClusterUnavailable, err)
	}
	return nil
}

// clientClosed reports whether the etcd client is closed: nothing sent now reaches etcd.
func (c *Coordinator) clientClosed() bool {
	select {
	case <-c.etcd.Closed():
		return true
	default:
		return false
	}
}

func (c *Coordinator) dkey(k string) string { return c.cfg.prefix + "d/" + encode(k) }
func (c *Coordinator) rkey(k string) string { return c.cfg.prefix + "r/" + encode(k) }
func (c *Coordinator) nkey() string         { return c.cfg.prefix + "n/" + encode(c.node) }

// encode makes a key safe to put under the prefix: no separator, no prefix of another key.
func encode(k string) string { return base64.RawURLEncoding.EncodeToString([]byte(k)) }

// requestErr maps a failed etcd request. A caller who cancelled gets their ctx error back. A
// request cut short because the caller's wait ran out is ErrTimeout when etcd had already
// answered that another node holds the key (contended): the wait was for that node. Anything
// else is ErrClusterUnavailable, with the caller's deadline error if that was what ran out.
func requestErr(ctx context.Context, what string, err error, contended bool) error {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, context.Canceled):
		return fmt.Errorf("etcdcoord: %s: %w", what, ctx.Err())
	case errors.Is(cause, recordlock.ErrTimeout) && contended:
		return fmt.Errorf("%w: etcdcoord: the wait ran out during a request to %s", recordlock.ErrTimeout, what)
	case errors.Is(cause, context.DeadlineExceeded):
		return fmt.Errorf("%w: etcdcoord: %s: %w", recordlock.ErrClusterUnavailable, what, cause)
	case cause != nil:
		return fmt.Errorf("%w: etcdcoord: %s: etcd did not answer in time", recordlock.ErrClusterUnavailable, what)
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
