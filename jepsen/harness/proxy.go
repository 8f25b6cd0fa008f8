package harness

import (
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/zap"
)

// nodeProxies is one node's way to etcd: a fault proxy to each member.
type nodeProxies []nodeProxy

type nodeProxy struct {
	proxy.Server
	addr string // host:port it listens on
}

// startProxies starts a proxy on a free loopback port to each of the members at addrs.
func startProxies(addrs []string) (nodeProxies, error) {
	var ps nodeProxies
	for _, to := range addrs {
		from := freePort()
		if from == "" {
			ps.close()
			return nil, fmt.Errorf("no free loopback port for a proxy to %s", to)
		}
		p := proxy.NewServer(proxy.ServerConfig{
			Logger: zap.NewNop(),
			From:   url.URL{Scheme: "tcp", Host: from},
			To:     url.URL{Scheme: "tcp", Host: to},
		})
		select {
		case <-p.Ready():
		case err := <-p.Error():
			ps.close()
			return nil, err
		}
		ps = append(ps, nodeProxy{p, from})
	}
	return ps, nil
}

// endpoints returns the addresses the node dials.
func (ps nodeProxies) endpoints() []string {
	var eps []string
	for _, p := range ps {
		eps = append(eps, p.addr)
	}
	return eps
}

// blackhole drops the node's traffic to and from etcd, both ways, until heal.
func (ps nodeProxies) blackhole() {
	for _, p := range ps {
		p.BlackholeTx()
		p.BlackholeRx()
	}
}

// delay adds latency, with a random variation of a fifth of it, both ways, until heal.
func (ps nodeProxies) delay(latency time.Duration) {
	for _, p := range ps {
		p.DelayTx(latency, latency/5)
		p.DelayRx(latency, latency/5)
	}
}

// heal ends every fault of the proxies.
func (ps nodeProxies) heal() {
	for _, p := range ps {
		p.UnblackholeTx()
		p.UnblackholeRx()
		p.UndelayTx()
		p.UndelayRx()
	}
}

func (ps nodeProxies) close() {
	for _, p := range ps {
		_ = p.Close()
	}
}
