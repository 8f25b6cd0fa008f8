package etcdcoord

import (
	"context"
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
	etcd     *countedEtcd // counts what it sends: Stats.Requests
	node     string
	cfg      config
	log      *slog.Logger
	ttlSec   int64
	maxLease time.Duration // the longest round the node's etcd lease can cover: TTL less skew

	ctx  context.Context // done once Close has handed everything back; owns the goroutines
	stop context.CancelFunc
	wg   sync.WaitGroup

	sessLock chan struct{} // one slot: one lease grant or refresh at a time
	detect   chan struct{} // one slot: wakes the deadlock detector
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
	ended   map[string]int64
	recalls map[string]recall // key → another node's pending recall
	// creating: key → this node's cold Txns for it whose reply is not read yet
	creating map[string]int
	// liveAsks: the recall values of this node's Acquire calls under way
	liveAsks map[string]bool
	// The graph of waits across nodes (deadlock.go): what the watch applied, this node's calls
	// that may wait for another node, by Txn, the node's view of its local waits, and the
	// holdings this node has published, by key.
	graph        graphView
	crossWaiters map[uint64]*crossWaiter
	localWaits   recordlock.LocalWaits
	published    map[string]string    // guarded by the detector, which alone uses it
	publishedOn  *session             // the lease published was put on
	exposed      atomic.Bool          // this node has holders in the graph: a release wakes the detector
	waiters      map[string][]*waiter // key → Acquire calls waiting for its etcd keys to change
	lastSweep    time.Duration        // Mono of the last look for idle delegations
	stats        Stats                // counters; Delegations and Retained are computed by Stats
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
		etcd:     &countedEtcd{etcdAPI: etcd},
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
		creating: map[string]int{},
		liveAsks: map[string]bool{},
		waiters:  map[string][]*waiter{},
		detect:   make(chan struct{}, 1),

		graph:        newGraphView(),
		crossWaiters: map[uint64]*crossWaiter{},
		published:    map[string]string{},
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.reqLimit)
	_, err := c.session(rctx, 0, false)
	cancel()
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	c.wg.Add(2)
	go c.watch()
	go c.detector()
	return c, nil
}

var errClosed = fmt.Errorf("%w: etcdcoord: coordinator closed", recordlock.ErrClusterUnavailable)

// leader makes a request or watch fail fast on a member that has lost the quorum's leader.
func leader(ctx context.Context) context.Context { return clientv3.WithRequireLeader(ctx) }

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
	var evicted []chan struct{}
	for _, d := range c.delegs {
		d.recalled = true
		// Revoking the lease below deletes its key: the watch must take that for a hand-back.
		d.handingBack = true
		revokes = append(revokes, d.takeAll()...)
		if d.evicted != nil {
			evicted = append(evicted, d.evicted)
		}
	}
	sess := c.sess
	c.mu.Unlock()
	for _, revoke := range revokes {
		revoke()
	}
	for _, ch := range evicted { // a hand-back waits for these revocations too
		<-ch
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
