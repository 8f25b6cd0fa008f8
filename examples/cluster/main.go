// Command cluster runs three recordlock nodes that share one etcd: three Lockers, each with its
// own RocksDB, its own etcd client and its own etcdcoord coordinator, as three processes would.
// It shows what cluster scope costs and guarantees:
//
//   - a repeat lock of a key the node already holds a delegation for makes no etcd request;
//   - a key passes from node to node as soon as its holder releases it, and the fencing token
//     increases at every hand-off;
//   - a node that closes hands its keys back at once;
//   - a node cut off from etcd, with no chance to hand anything back, loses its keys within the
//     TTL of its etcd lease, and its lock's lease has lapsed before another node gets the key.
//
// By default it starts an embedded single-member etcd on loopback ports in a temporary
// directory; -etcd host:port uses a running one instead (its keys go under a prefix of their
// own, deleted at the end).
//
//	go run .                      # from examples/cluster
//	go run . -etcd 127.0.0.1:2379
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/linxGnu/grocksdb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/etcdcoord"
)

// ttl is each node's etcd lease: a node cut off from etcd loses its keys within it. A lock's
// Lease must be at most ttl less etcdcoord.DefaultSkew.
const ttl = 3 * time.Second

func main() {
	endpoint := flag.String("etcd", "", "host:port of a running etcd (default: start an embedded one)")
	flag.Parse()
	if err := run(*endpoint); err != nil {
		log.Fatal("cluster: ", err)
	}
}

func run(endpoint string) error {
	prefix := etcdcoord.DefaultPrefix
	if endpoint == "" {
		addr, stop, err := startEtcd()
		if err != nil {
			return err
		}
		defer stop()
		endpoint = addr
	} else {
		// A running etcd may serve others: keep to a prefix of this run's own.
		prefix = fmt.Sprintf("/recordlock-cluster-example/%d/", os.Getpid())
		defer deletePrefix(endpoint, prefix)
	}
	fmt.Printf("etcd at %s; three nodes, etcd lease TTL %v\n", endpoint, ttl)

	var nodes []*node
	defer func() {
		for _, n := range nodes {
			n.close()
		}
	}()
	for _, name := range []string{"node-a", "node-b", "node-c"} {
		n, err := startNode(name, endpoint, prefix)
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	a, b, c := nodes[0], nodes[1], nodes[2]
	ctx := context.Background()
	key := []byte("order/42")
	opts := recordlock.Options{Lease: time.Second, Timeout: 10 * time.Second}

	// A cold key costs one etcd Txn; the repeat lock is served from the node's delegation.
	var tokens []uint64
	for i, what := range []string{"first lock", "repeat lock"} {
		before := a.requests.Load()
		h, err := a.locker.Lock(ctx, key, opts)
		if err != nil {
			return err
		}
		sent := a.requests.Load() - before
		fmt.Printf("%s: %s of %s: token %d, %d etcd requests\n", a.name, what, key, h.Token(), sent)
		h.Release()
		if i == 0 {
			tokens = append(tokens, h.Token())
		} else if sent != 0 {
			return fmt.Errorf("the repeat lock sent %d etcd requests", sent)
		}
	}

	// Hand-offs: each node asks while the previous holder still holds the key, and gets it as
	// soon as that holder releases.
	holder, err := a.locker.Lock(ctx, key, opts)
	if err != nil {
		return err
	}
	for _, next := range []*node{b, c} {
		got := make(chan *recordlock.Handle, 1)
		failed := make(chan error, 1)
		go func() {
			h, err := next.locker.Lock(ctx, key, opts)
			if err != nil {
				failed <- err
				return
			}
			got <- h
		}()
		time.Sleep(200 * time.Millisecond) // let the recall reach the holder
		released := time.Now()
		holder.Release()
		select {
		case h := <-got:
			fmt.Printf("%s: got %s %v after the holder released it: token %d\n",
				next.name, key, time.Since(released).Round(time.Millisecond), h.Token())
			tokens = append(tokens, h.Token())
			holder = h
		case err := <-failed:
			return fmt.Errorf("%s: %w", next.name, err)
		}
	}
	holder.Release()
	if tokens[0] >= tokens[1] || tokens[1] >= tokens[2] {
		return fmt.Errorf("fencing tokens did not increase across the nodes: %v", tokens)
	}
	fmt.Printf("fencing tokens across node-a, node-b, node-c: %v, strictly increasing\n", tokens)

	// A key is handed back on release only while another node waits for it, so node-c, which
	// nobody waited for, still holds order/42, and a key no other node has wanted stays
	// delegated to the node that locked it too: closing that node hands both back at once,
	// rather than at the end of its lease.
	idle := []byte("order/43")
	h, err := c.locker.Lock(ctx, idle, opts)
	if err != nil {
		return err
	}
	h.Release()
	if n := c.coord.Stats().Delegations; n != 2 {
		return fmt.Errorf("%s holds %d delegations before it closes, not the two of %s and %s", c.name, n, key, idle)
	}
	start := time.Now()
	if err := c.close(); err != nil {
		return err
	}
	h, err = a.locker.Lock(ctx, idle, opts)
	if err != nil {
		return err
	}
	took := time.Since(start)
	fmt.Printf("%s, holding the delegation of %s, closed: %s got it %v later, token %d\n",
		c.name, idle, a.name, took.Round(time.Millisecond), h.Token())
	h.Release()
	if took >= ttl {
		return fmt.Errorf("%s waited %v for the key of a closed node: it was not handed back", a.name, took)
	}

	return cutOff(ctx, a, b)
}

// cutOff shows a node that loses etcd while it holds a lock: its client is closed with no hand
// back. The lock's lease lapses on its own node, and the other node gets the key once etcd
// expires the cut-off node's lease: within the TTL of its last refresh, and so (etcd checks
// expiries every half second or so) about the TTL after the cut.
func cutOff(ctx context.Context, a, b *node) error {
	key := []byte("order/7")
	stuck, err := b.locker.Lock(ctx, key, recordlock.Options{Lease: time.Second})
	if err != nil {
		return err
	}
	start := time.Now()
	b.cut()
	fmt.Printf("%s holds %s with a 1s lease and is cut off from etcd\n", b.name, key)
	lapsed := make(chan time.Duration, 1)
	go func() {
		<-stuck.Done()
		lapsed <- time.Since(start)
	}()
	h, err := a.locker.Lock(ctx, key, recordlock.Options{Lease: time.Second, Timeout: 2 * ttl})
	if err != nil {
		return fmt.Errorf("%s: lock %s held by a cut-off node: %w", a.name, key, err)
	}
	took := time.Since(start)
	defer h.Release()
	select {
	case d := <-lapsed:
		fmt.Printf("%s's lock lapsed after %v; %s got %s after %v, once etcd expired the node's lease (TTL %v)\n",
			b.name, d.Round(time.Millisecond), a.name, key, took.Round(time.Millisecond), ttl)
	default:
		return fmt.Errorf("%s got %s while the cut-off node's lock was still live", a.name, key)
	}
	if took > ttl+time.Second {
		return fmt.Errorf("%s waited %v for a cut-off node's key, over a second longer than the TTL", a.name, took)
	}
	return nil
}

// node is one member of the cluster: a RocksDB, its Locker, an etcd client and a coordinator.
type node struct {
	name     string
	locker   *recordlock.Locker
	coord    *etcdcoord.Coordinator
	cli      *clientv3.Client
	closeDB  func()
	requests atomic.Int64 // gRPC requests the client sent: unary calls and stream messages
	closed   bool
}

func startNode(name, endpoint, prefix string) (*node, error) {
	n := &node{name: name}
	db, closeDB, err := openTempDB("recordlock-cluster-" + name + "-")
	if err != nil {
		return nil, err
	}
	n.closeDB = closeDB
	if n.locker, err = recordlock.New(db); err != nil {
		closeDB()
		return nil, err
	}
	n.cli, err = clientv3.New(clientv3.Config{
		Endpoints:            []string{endpoint},
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		// The client logs each retry of a request at warning level: a cut-off node's Close
		// would print one line per retry. The coordinator's logger reports what matters.
		Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(n.countUnary),
			grpc.WithChainStreamInterceptor(n.countStream),
		},
	})
	if err != nil {
		n.locker.Close()
		closeDB()
		return nil, err
	}
	// Only the coordinator's errors: at warning level it also reports, for instance, the
	// delegations of an idle node lapsing with its etcd lease, which this demo lets happen.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	n.coord, err = etcdcoord.New(n.cli, name,
		etcdcoord.WithPrefix(prefix),
		etcdcoord.WithTTL(ttl),
		etcdcoord.WithTimestamp(n.locker.Timestamp),
		etcdcoord.WithLogger(logger))
	if err != nil {
		n.cli.Close()
		n.locker.Close()
		closeDB()
		return nil, err
	}
	n.locker.SetCoordinator(n.coord)
	return n, nil
}

// cut closes the node's etcd client without handing anything back, as a network partition or a
// crash would leave it.
func (n *node) cut() { _ = n.cli.Close() }

// close closes the coordinator, which hands the node's delegations back, then the rest.
func (n *node) close() error {
	if n.closed {
		return nil
	}
	n.closed = true
	err := n.coord.Close()
	if errors.Is(err, recordlock.ErrClusterUnavailable) {
		err = nil // a cut-off node cannot hand back: its keys lapse with its etcd lease
	}
	_ = n.cli.Close()
	n.locker.Close()
	n.closeDB()
	return err
}

func (n *node) countUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	n.requests.Add(1)
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (n *node) countStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return countingStream{s, &n.requests}, nil
}

// countingStream counts the messages a client sends on a stream (a watch or a lease refresh).
type countingStream struct {
	grpc.ClientStream
	sent *atomic.Int64
}

func (s countingStream) SendMsg(m any) error {
	s.sent.Add(1)
	return s.ClientStream.SendMsg(m)
}

// deletePrefix removes what this run left under prefix in a running etcd.
func deletePrefix(endpoint, prefix string) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		return
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = cli.Delete(ctx, prefix, clientv3.WithPrefix())
}

// openTempDB opens a new RocksDB database in a fresh temporary directory named with prefix. The
// func it returns closes the database and removes the directory.
func openTempDB(prefix string) (*grocksdb.DB, func(), error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, nil, err
	}
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	db, err := grocksdb.OpenDb(opts, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	return db, func() {
		db.Close()
		_ = os.RemoveAll(dir)
	}, nil
}
