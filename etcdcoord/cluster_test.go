package etcdcoord_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

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

type member struct {
	cfg     *embed.Config
	srv     *server
	id      string // member ID as etcd writes it in X-Server-From
	peer    *proxy // in front of the member's peer port; the URL the others dial
	client  string // client address
	stopped bool
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

func (m *member) start() {
	ee, err := embed.StartEtcd(m.cfg)
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
