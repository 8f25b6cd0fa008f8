package etcdcoord_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
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
// test. Its short election timeout allows leases of one second. A free port may be taken by
// another test process before etcd binds it, so a bind that fails is tried again on new ports.
func startEtcd(tb testing.TB) *server {
	tb.Helper()
	for attempt := 1; ; attempt++ {
		e, err := tryStartEtcd(tb)
		if err == nil {
			return e
		}
		if attempt == 5 || !strings.Contains(err.Error(), "address already in use") {
			require.NoError(tb, err)
		}
	}
}

// tryStartEtcd is one attempt of startEtcd.
func tryStartEtcd(tb testing.TB) (*server, error) {
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
	if err != nil {
		return nil, err
	}
	e := &server{Etcd: ee}
	tb.Cleanup(e.stop)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		tb.Fatal("etcd did not become ready")
	}
	return e, nil
}

// server is an embedded etcd that can be stopped before the test ends.
type server struct {
	*embed.Etcd
	once sync.Once
}

func (s *server) stop() { s.once.Do(s.Close) }

// loopbackURL returns an http URL on a free loopback port below the kernel's range of ephemeral
// ports, one this process has not handed out before. A port of that range, once let go, can be
// taken as the local end of any outgoing connection for as long as the connection lasts, and etcd
// could then not bind it, nor rebind it on a restart; a port below it is only ever taken by a
// listener.
func loopbackURL(tb testing.TB) url.URL {
	tb.Helper()
	const lowest = 10000
	top := ephemeralPortsFrom()
	for range 1000 {
		port := lowest + rand.IntN(top-lowest)
		if _, taken := handedOut.LoadOrStore(port, true); taken {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		require.NoError(tb, ln.Close())
		return url.URL{Scheme: "http", Host: ln.Addr().String()}
	}
	tb.Fatalf("no free loopback port in [%d, %d)", lowest, top)
	return url.URL{}
}

// ephemeralPortsFrom is the first port of the kernel's range of ephemeral ports (Linux's
// ip_local_port_range), or 32768, its default, where it cannot be read or leaves few ports below.
func ephemeralPortsFrom() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= 20000 {
		return 32768
	}
	return lo
}

// handedOut holds the ports loopbackURL has tried, as keys: a member that was stopped keeps its
// ports for its restart.
var handedOut sync.Map

// requests counts the gRPC requests a client sends, by method: each unary call and each message
// sent on a stream.
type requests struct {
	mu sync.Mutex
	by map[string]int
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
	r.mu.Unlock()
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
	// faulty: the test deletes delegations or cuts etcd off, so delegations may really be lost;
	// otherwise Stats.Lost must be 0 when the test ends
	faulty bool
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
	if !nc.faulty {
		tb.Cleanup(func() { // before Close
			assert.Zero(tb, n.coord.Stats().Lost, "%s: delegations counted as lost with no fault injected", name)
		})
	}
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

// Locks started in a goroutine, and etcd keys and requests as the tests watch them.

// lockResult is what a Lock started with lockAsync returned.
type lockResult struct {
	h   *recordlock.Handle
	err error
}

// lockAsync starts a Lock on n and returns where its result arrives.
func lockAsync(n *node, key string, opts recordlock.Options) chan lockResult {
	got := make(chan lockResult, 1)
	go func() {
		h, err := n.l.Lock(context.Background(), []byte(key), opts)
		got <- lockResult{h, err}
	}()
	return got
}

// admitted reports whether the Lock behind got has returned, putting its result back.
func admitted(got chan lockResult) bool {
	select {
	case r := <-got:
		got <- r
		return true
	default:
		return false
	}
}

// waitForKey blocks until key exists in etcd.
func waitForKey(t *testing.T, cli *clientv3.Client, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	require.NoError(t, err)
	if len(resp.Kvs) > 0 {
		return
	}
	for wr := range cli.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1), clientv3.WithFilterDelete()) {
		if len(wr.Events) > 0 {
			return
		}
	}
	t.Fatalf("%s did not appear", key)
}

// waitForDelete blocks until key does not exist in etcd.
func waitForDelete(t *testing.T, cli *clientv3.Client, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	require.NoError(t, err)
	if len(resp.Kvs) == 0 {
		return
	}
	for wr := range cli.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1), clientv3.WithFilterPut()) {
		if len(wr.Events) > 0 {
			return
		}
	}
	t.Fatalf("%s was not deleted", key)
}

// encode is how the coordinator names a column family or a key in etcd.
func encode(k string) string { return base64.RawURLEncoding.EncodeToString([]byte(k)) }

// exclusiveKey is the etcd key of the exclusive delegation of key in the default column family.
func exclusiveKey(key string) string { return "/recordlock/x/" + encode("default") + "/" + encode(key) }

// sharedKey is the etcd key of the shared delegation of key in the default column family held on
// lease.
func sharedKey(key string, lease int64) string {
	return "/recordlock/s/" + encode("default") + "/" + encode(key) + "/" + fmt.Sprintf("%016x", lease)
}

// recallKey is the etcd key of the pending recall of key in the default column family.
func recallKey(key string) string { return "/recordlock/r/" + encode("default") + "/" + encode(key) }

// errLostReply stands for a reply that never arrived: the request may have landed.
var errLostReply = errors.New("test: reply lost")

// isWithdraw reports whether a request is a compare-and-delete of a recall key.
func isWithdraw(req any) bool {
	txn, ok := req.(*etcdserverpb.TxnRequest)
	return ok && len(txn.Compare) == 1 && txn.Compare[0].Target == etcdserverpb.Compare_VALUE &&
		len(txn.Success) == 1 && txn.Success[0].GetRequestDeleteRange() != nil
}

// A cluster of three etcd members whose peer and client traffic runs through proxies, so that
// a test can kill, restart and isolate members and cut a node's client: the fault suite's.

// proxy is a TCP proxy in front of one address, for cutting connections. A peer proxy reads the
// sending member of each connection from its first HTTP request (etcd's peer requests name
// their sender in X-Server-From), so that one member's traffic can be refused on its own.
type proxy struct {
	ln     net.Listener
	target string
	peer   bool
	wg     sync.WaitGroup

	mu      sync.Mutex
	refuse  func(from string) bool // nil: refuse nothing
	conns   map[*proxyConn]struct{}
	stopped bool
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) stop() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.setRefuse(func(string) bool { return true })
	p.wg.Wait()
}

// setRefuse closes the connections refuse rejects and refuses new ones like them; nil heals.
func (p *proxy) setRefuse(refuse func(from string) bool) {
	p.mu.Lock()
	p.refuse = refuse
	var cut []*proxyConn
	for c := range p.conns {
		if refuse != nil && refuse(c.from) {
			cut = append(cut, c)
		}
	}
	p.mu.Unlock()
	for _, c := range cut {
		c.close()
	}
}

func (p *proxy) cut()  { p.setRefuse(func(string) bool { return true }) }
func (p *proxy) heal() { p.setRefuse(nil) }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(in)
	}
}

func (p *proxy) serve(in net.Conn) {
	defer p.wg.Done()
	var head []byte
	var from string
	if p.peer {
		var err error
		if head, from, err = readHead(in); err != nil {
			_ = in.Close()
			return
		}
	}
	p.mu.Lock()
	refused := p.stopped || (p.refuse != nil && p.refuse(from))
	p.mu.Unlock()
	if refused {
		_ = in.Close()
		return
	}
	out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = in.Close()
		return
	}
	c := &proxyConn{in: in, out: out, from: from}
	p.mu.Lock()
	if p.stopped || (p.refuse != nil && p.refuse(from)) {
		p.mu.Unlock()
		c.close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	if _, err := out.Write(head); err != nil {
		c.close()
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_, _ = io.Copy(out, in)
		c.close()
	}()
	_, _ = io.Copy(in, out)
	c.close()
}

type proxyConn struct {
	in, out net.Conn
	from    string
}

func (c *proxyConn) close() {
	_ = c.in.Close()
	_ = c.out.Close()
}

// newProxy starts a proxy to target on a free loopback port, stopped at the end of the test.
func newProxy(tb testing.TB, target string, peer bool) *proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	p := &proxy{ln: ln, target: target, peer: peer, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.stop)
	return p
}

// readHead reads the header of the first HTTP request on a connection and returns the bytes it
// read and the sender it names.
func readHead(in net.Conn) ([]byte, string, error) {
	_ = in.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer func() { _ = in.SetReadDeadline(time.Time{}) }()
	br := bufio.NewReader(in)
	var head []byte
	var from string
	for {
		line, err := br.ReadString('\n')
		head = append(head, line...)
		if err != nil {
			return nil, "", err
		}
		if name, value, ok := strings.Cut(line, ":"); ok && strings.EqualFold(name, "X-Server-From") {
			from = strings.TrimSpace(value)
		}
		if line == "\r\n" {
			break
		}
	}
	rest, _ := br.Peek(br.Buffered())
	return append(head, rest...), from, nil
}

// etcdCluster is a 3-member embedded etcd whose peer traffic runs through proxies.
type etcdCluster struct {
	tb      testing.TB
	members []*member
}

// endpoints are the client addresses of every member.
func (ec *etcdCluster) endpoints() []string {
	var eps []string
	for _, m := range ec.members {
		eps = append(eps, m.client)
	}
	return eps
}

// leader returns the index of the member that leads now, waiting for one.
func (ec *etcdCluster) leader() int {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for i, m := range ec.members {
			if !m.stopped && m.srv.Server.Leader().String() == m.id {
				return i
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	ec.tb.Fatal("no leader")
	return -1
}

// kill stops member i; restart starts it again on its data.
func (ec *etcdCluster) kill(i int) {
	ec.members[i].srv.stop()
	ec.members[i].stopped = true
}

func (ec *etcdCluster) restart(i int) {
	m := ec.members[i]
	m.start()
	m.ready()
}

// isolate cuts member i off from the others, in both directions, on their peer proxies.
func (ec *etcdCluster) isolate(i int) {
	id := ec.members[i].id
	for j, m := range ec.members {
		if j == i {
			m.peer.cut()
		} else {
			m.peer.setRefuse(func(from string) bool { return from == id })
		}
	}
}

// heal lets every member reach every other again.
func (ec *etcdCluster) heal() {
	for _, m := range ec.members {
		m.peer.heal()
	}
}

type member struct {
	cfg     *embed.Config
	srv     *server
	id      string // member ID as etcd writes it in X-Server-From
	peer    *proxy // in front of the member's peer port; the URL the others dial
	client  string // client address
	stopped bool
}

// start starts (or restarts) the member on its ports. Another process's listener may hold one for
// a moment, so a bind that fails is tried again, for up to five seconds.
func (m *member) start() {
	ee, err := embed.StartEtcd(m.cfg)
	for try := 0; err != nil && strings.Contains(err.Error(), "address already in use") && try < 50; try++ {
		time.Sleep(100 * time.Millisecond)
		ee, err = embed.StartEtcd(m.cfg)
	}
	if err != nil {
		panic(fmt.Sprintf("start %s: %v", m.cfg.Name, err))
	}
	m.srv = &server{Etcd: ee}
	m.stopped = false
}

func (m *member) ready() {
	select {
	case <-m.srv.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		panic(m.cfg.Name + " did not become ready")
	}
}

// startCluster starts three members on loopback, stopped at the end of the test.
func startCluster(tb testing.TB) *etcdCluster {
	tb.Helper()
	ec := &etcdCluster{tb: tb}
	var initial []string
	for i := range 3 {
		peer := loopbackURL(tb)
		m := &member{peer: newProxy(tb, peer.Host, true)}
		client := loopbackURL(tb)
		m.client = client.Host
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = tb.TempDir()
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.ListenPeerUrls = []url.URL{peer}
		cfg.AdvertisePeerUrls = []url.URL{{Scheme: "http", Host: m.peer.addr()}}
		cfg.TickMs, cfg.ElectionMs = 100, 1000
		cfg.UnsafeNoFsync = true
		cfg.LogLevel = "error"
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		m.cfg = cfg
		initial = append(initial, fmt.Sprintf("%s=http://%s", cfg.Name, m.peer.addr()))
		ec.members = append(ec.members, m)
	}
	for _, m := range ec.members {
		m.cfg.InitialCluster = strings.Join(initial, ",")
		m.start()
	}
	for _, m := range ec.members {
		m.ready()
		m.id = m.srv.Server.MemberID().String()
	}
	tb.Cleanup(func() {
		for _, m := range ec.members {
			if m.srv != nil {
				m.srv.stop()
			}
		}
	})
	return ec
}
