package etcdcoord_test

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/etcdcoord"
	"github.com/recordlock/recordlock/internal/tempdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// long makes the fault suite and the retention test run at full length.
var long = flag.Bool("long", false, "run the fault suite and the retention test at full length")

// quiet is the logger of coordinators whose logs no test reads.
var quiet = slog.New(slog.DiscardHandler)

// startEtcd runs a single-member etcd on loopback ports in a temp dir, stopped at the end of the
// test. Its short election timeout allows leases of one second.
func startEtcd(tb testing.TB) *server {
	tb.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = tb.TempDir()
	client, peer := loopbackURL(tb), loopbackURL(tb)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs, cfg.ElectionMs = 50, 500
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	ee, err := embed.StartEtcd(cfg)
	require.NoError(tb, err)
	e := &server{Etcd: ee}
	tb.Cleanup(e.stop)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		tb.Fatal("etcd did not become ready")
	}
	return e
}

// server is an embedded etcd that can be stopped before the test ends.
type server struct {
	*embed.Etcd
	once sync.Once
}

func (s *server) stop() { s.once.Do(s.Close) }

// loopbackURL returns an http URL on a free loopback port.
func loopbackURL(tb testing.TB) url.URL {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	addr := ln.Addr().String()
	require.NoError(tb, ln.Close())
	return url.URL{Scheme: "http", Host: addr}
}

// requests counts the gRPC requests a client sends, by method: each unary call and each message
// sent on a stream.
type requests struct {
	mu        sync.Mutex
	by        map[string]int
	onRequest func(method string)
	// hook, when set, runs each unary call in place of the plain invocation; invoke sends it.
	hook func(ctx context.Context, method string, req any, invoke func() error) error
}

// setHook sets or clears the unary hook.
func (r *requests) setHook(h func(ctx context.Context, method string, req any, invoke func() error) error) {
	r.mu.Lock()
	r.hook = h
	r.mu.Unlock()
}

func (r *requests) add(method string) {
	r.mu.Lock()
	r.by[method]++
	f := r.onRequest
	r.mu.Unlock()
	if f != nil {
		f(method)
	}
}

func (r *requests) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]int, len(r.by))
	for k, v := range r.by {
		m[k] = v
	}
	return m
}

// since returns the requests sent after snapshot before was taken.
func (r *requests) since(before map[string]int) map[string]int {
	diff := map[string]int{}
	for k, v := range r.snapshot() {
		if d := v - before[k]; d != 0 {
			diff[k] = d
		}
	}
	return diff
}

func (r *requests) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	r.add(method)
	r.mu.Lock()
	hook := r.hook
	r.mu.Unlock()
	invoke := func() error { return invoker(ctx, method, req, reply, cc, opts...) }
	if hook != nil {
		return hook(ctx, method, req, invoke)
	}
	return invoke()
}

func (r *requests) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &countedStream{ClientStream: s, r: r, method: method}, nil
}

type countedStream struct {
	grpc.ClientStream
	r      *requests
	method string
}

func (s *countedStream) SendMsg(m any) error {
	s.r.add(s.method)
	return s.ClientStream.SendMsg(m)
}

// node is one participant: its own RocksDB, Locker, etcd client and coordinator.
type node struct {
	name  string
	db    *grocksdb.DB
	l     *recordlock.Locker
	cli   *clientv3.Client
	coord *etcdcoord.Coordinator
	reqs  *requests
}

type nodeConfig struct {
	clock     recordlock.Clock
	opts      []etcdcoord.Option
	endpoints []string // default: e's client address
}

// newNode starts a node on e (or on nc.endpoints), torn down at the end of the test.
func newNode(tb testing.TB, e *server, name string, nc nodeConfig) *node {
	tb.Helper()
	if nc.clock == nil {
		nc.clock = recordlock.SystemClock()
	}
	n := &node{name: name, reqs: &requests{by: map[string]int{}}}

	db := tempdb.New(tb)
	n.db = db
	var err error

	if nc.endpoints == nil {
		nc.endpoints = []string{e.Clients[0].Addr().String()}
	}
	n.cli, err = clientv3.New(clientv3.Config{
		Endpoints:            nc.endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(n.reqs.unary),
			grpc.WithChainStreamInterceptor(n.reqs.stream),
		},
	})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = n.cli.Close() })

	n.l, err = recordlock.New(db, recordlock.WithClock(nc.clock))
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = n.l.Close() })

	opts := append([]etcdcoord.Option{etcdcoord.WithClock(nc.clock), etcdcoord.WithTimestamp(n.l.Timestamp),
		etcdcoord.WithLogger(quiet)}, nc.opts...)
	n.coord, err = etcdcoord.New(n.cli, name, opts...)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = n.coord.Close() })
	n.l.SetCoordinator(n.coord)
	return n
}

// cluster are the options of a cluster-scoped lock.
func cluster(lease, timeout time.Duration) recordlock.Options {
	return recordlock.Options{Scope: recordlock.ScopeCluster, Lease: lease, Timeout: timeout}
}

// lease returns the node's etcd lease: the one its name is registered on.
func (n *node) lease(tb testing.TB) int64 {
	tb.Helper()
	resp, err := n.cli.Get(context.Background(), "/recordlock/n/"+encode(n.name))
	require.NoError(tb, err)
	require.Len(tb, resp.Kvs, 1)
	return resp.Kvs[0].Lease
}
