// Package node is one node process of the harness: clients that lock a hot key, read its
// register at the shared resource, write it and release, recording every operation in the
// node's history log; and bank clients beside them that move money between accounts at the
// resource under exclusive locks and read every account under shared ones, recording theirs in
// the node's bank log. The lock is recordlock's (a Locker with an etcdcoord.Coordinator on the
// node's own RocksDB, writing with its fencing token) or, for the control, etcd's
// concurrency.Mutex with no token.
package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/jepsen/history"
	"github.com/recordlock/recordlock/jepsen/resource"
)

// The systems a node can run.
const (
	Recordlock = "recordlock"
	EtcdMutex  = "etcd-mutex"
	// RecordlockNoToken is recordlock with its writes in Fence but without the token, for
	// showing what the resource's check of the token adds.
	RecordlockNoToken = "recordlock-no-token"
)

// Config is what a node runs.
type Config struct {
	System      string        // Recordlock or EtcdMutex
	Index       int           // the node's index, 0 up
	Incarnation int           // how many times the node has been started before, 0 up
	Endpoints   []string      // etcd, through the node's own proxies
	DBDir       string        // the node's RocksDB (recordlock only)
	Resource    string        // host:port of the resource process
	History     string        // the history log, appended to
	Clients     int           // concurrent clients
	Keys        []string      // the hot keys
	TTL         time.Duration // the etcd lease TTL of the coordinator or the Mutex's session
	Lease       time.Duration // the recordlock lock's Lease
	Hold        time.Duration // the most a client waits between its read and its write
	Seed        uint64
	BankHistory string   // the bank log, appended to
	BankClients int      // concurrent bank clients, beside Clients
	Accounts    []string // the bank's accounts, in key order
}

// lock is one system's lock: held is what a client holds between lock and release.
type lock interface {
	// lock locks key for client, one of the node's clients.
	lock(ctx context.Context, client int, key string) (held, error)
	// lockAll locks keys, given in key order, for client, shared or exclusive as the system
	// allows: all of them or none.
	lockAll(ctx context.Context, client int, keys []string, shared bool) (heldAll, error)
	close() error
}

type held interface {
	// token is what the client's requests to the resource carry.
	token() resource.Token
	// fence runs write as the system allows a holder to write: recordlock's Handle.Fence, or
	// directly for the Mutex.
	fence(write func() error) error
	release()
}

// eachLocker is a lock whose Txns can lock keys one at a time in any order, because a cycle of
// them waiting for each other is broken with ErrDeadlock. etcd's Mutex has no such detection:
// Mutexes taken in opposite orders would wait for each other until the wait ran out, so the
// control does not implement it and takes every set of keys in key order.
type eachLocker interface {
	// lockEach locks keys exclusive for client with one Lock after another, in the order given,
	// in one Txn: all of them or none. A lock that would close a cycle fails with an error
	// matching ErrDeadlock, after the locks already taken are released.
	lockEach(ctx context.Context, client int, keys []string) (heldAll, error)
}

// heldAll is what a client holds between lockAll or lockEach and release.
type heldAll interface {
	// tokens are what the client's requests to the resource carry, one per key, in the order
	// the keys were given.
	tokens() []resource.Token
	// fence runs f as the system allows a holder of every key to read and write.
	fence(f func() error) error
	release()
}

// Run runs the node's clients until ctx is done, lets each finish its operation, and closes.
func Run(ctx context.Context, cfg Config) error {
	// Operation IDs are (index+1)·10¹⁵ + incarnation·10¹¹ + client·10⁹ + count: unique while
	// these stay in range.
	// Bank clients come after the others in the client digits.
	if cfg.Clients < 1 || cfg.Clients+cfg.BankClients >= 100 || cfg.BankClients < 0 || len(cfg.Keys) == 0 ||
		cfg.Incarnation >= 1000 || cfg.Hold <= 0 || (cfg.BankClients > 0 && len(cfg.Accounts) < 2) {
		return fmt.Errorf("node: bad config: %d clients, %d bank clients, %d keys, %d accounts, incarnation %d, hold %v",
			cfg.Clients, cfg.BankClients, len(cfg.Keys), len(cfg.Accounts), cfg.Incarnation, cfg.Hold)
	}
	log, err := history.OpenLog(cfg.History)
	if err != nil {
		return err
	}
	defer log.Close()
	var bankLog *history.Log
	if cfg.BankClients > 0 {
		if bankLog, err = history.OpenLog(cfg.BankHistory); err != nil {
			return err
		}
		defer bankLog.Close()
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            cfg.Endpoints,
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return err
	}
	defer cli.Close()
	var l lock
	switch cfg.System {
	case Recordlock, RecordlockNoToken:
		l, err = openRecordlock(ctx, cli, cfg)
	case EtcdMutex:
		l, err = openMutex(cli, cfg)
	default:
		err = fmt.Errorf("node: unknown system %q", cfg.System)
	}
	if err != nil {
		return err
	}
	res := resource.NewClient(cfg.Resource)
	var wg sync.WaitGroup
	for c := range cfg.Clients {
		wg.Go(func() {
			w := worker{cfg: cfg, lock: l, res: res, log: log, client: cfg.Index*cfg.Clients + c,
				rng: rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Index*100000+cfg.Incarnation*100+c)))}
			w.idBase = int64(cfg.Index+1)*1e15 + int64(cfg.Incarnation)*1e11 + int64(c)*1e9
			for ctx.Err() == nil {
				w.op()
			}
		})
	}
	for b := range cfg.BankClients {
		wg.Go(func() {
			c := cfg.Clients + b
			w := bankWorker{cfg: cfg, lock: l, res: res, log: bankLog, client: c, lockClient: cfg.Index*cfg.Clients + c,
				rng: rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Index*100000+cfg.Incarnation*100+c)))}
			w.idBase = int64(cfg.Index+1)*1e15 + int64(cfg.Incarnation)*1e11 + int64(c)*1e9
			for ctx.Err() == nil {
				w.op()
			}
		})
	}
	wg.Wait()
	return l.close()
}

// worker is one client.
type worker struct {
	cfg    Config
	lock   lock
	res    *resource.Client
	log    *history.Log
	client int
	rng    *rand.Rand
	idBase int64
	n      int64
}

// op runs one operation: lock, read, wait up to Hold, write the op's ID, release. Its own
// requests are bounded by timeouts rather than the run's ctx, so that a node told to stop
// finishes the operation it is in.
func (w *worker) op() {
	w.n++
	id := w.idBase + w.n
	key := w.cfg.Keys[w.rng.IntN(len(w.cfg.Keys))]
	hold := time.Duration(w.rng.Int64N(int64(w.cfg.Hold)))
	w.record(history.Event{Op: id, Key: key, Phase: history.Invoke})
	outcome, cause, err := w.run(id, key, hold)
	e := history.Event{Op: id, Key: key, Phase: history.Complete, Outcome: outcome, Cause: cause}
	if err != nil {
		e.Error = err.Error()
	}
	w.record(e)
	if outcome == history.Fail {
		time.Sleep(10 * time.Millisecond) // a failed lock is often etcd away: do not spin
	}
}

// run runs the operation and returns its outcome and, unless it is OK, its cause.
func (w *worker) run(id int64, key string, hold time.Duration) (history.Outcome, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	h, err := w.lock.lock(ctx, w.client, key)
	if err != nil {
		return history.Fail, lockCause(err), err
	}
	defer h.release()
	tok := h.token()
	v, err := w.res.Read(context.Background(), key, tok)
	if errors.Is(err, resource.ErrStaleToken) {
		return history.Fail, "read refused: stale token", err
	} else if err != nil {
		return history.Fail, "read failed", err
	}
	w.record(history.Event{Op: id, Key: key, Phase: history.Read, Value: v, Token: tok.Value})
	sent := false
	err = h.fence(func() error {
		time.Sleep(hold) // a holder's work between its read and its write
		sent = true
		return w.res.Write(context.Background(), key, id, tok)
	})
	switch {
	case err == nil:
		return history.OK, "", nil
	case errors.Is(err, recordlock.ErrLeaseExpired) && !sent:
		return history.Fail, "write not sent: lease expired", err
	case errors.Is(err, resource.ErrStaleToken):
		return history.Fail, "write refused: stale token", err
	case !sent:
		return history.Fail, "write not sent", err
	default:
		return history.Unknown, "write unanswered", err
	}
}

// lockCause names why a lock failed.
func lockCause(err error) string {
	switch {
	case errors.Is(err, recordlock.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "lock timed out"
	case errors.Is(err, recordlock.ErrClusterUnavailable):
		return "lock: etcd unavailable"
	default:
		return "lock failed"
	}
}

func (w *worker) record(e history.Event) {
	e.Client, e.Time = w.client, time.Now().UnixNano()
	if err := w.log.Append(e); err != nil {
		panic(fmt.Sprintf("node: history log: %v", err)) // a history with a hole cannot be checked
	}
}
