package harness

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Member is one etcd server process.
type Member struct {
	Name       string
	ClientAddr string // host:port
	proc       *Proc
}

// Etcd is a cluster of etcd processes on loopback, each with its own data directory.
type Etcd struct {
	Members []*Member
	cli     *clientv3.Client // straight to the members, for the harness's own questions
}

// StartEtcd starts n members of the etcd binary bin under dir and waits until the cluster has
// a leader.
func StartEtcd(ctx context.Context, ps *Procs, bin, dir string, n int) (*Etcd, error) {
	e := &Etcd{}
	var peers []string
	var args [][]string
	for i := range n {
		name := fmt.Sprintf("etcd-%d", i+1)
		client, peer := freePort(), freePort()
		if client == "" || peer == "" {
			return nil, fmt.Errorf("no free loopback port for %s", name)
		}
		peers = append(peers, name+"=http://"+peer)
		e.Members = append(e.Members, &Member{Name: name, ClientAddr: client})
		args = append(args, []string{
			"--name", name, "--data-dir", filepath.Join(dir, name),
			"--listen-client-urls", "http://" + client, "--advertise-client-urls", "http://" + client,
			"--listen-peer-urls", "http://" + peer, "--initial-advertise-peer-urls", "http://" + peer,
			"--initial-cluster-token", "jepsen", "--initial-cluster-state", "new", "--log-level", "warn",
		})
	}
	for i, m := range e.Members {
		a := append(args[i], "--initial-cluster", strings.Join(peers, ","))
		p, err := ps.Start(m.Name, bin, a, filepath.Join(dir, m.Name+".log"))
		if err != nil {
			return nil, err
		}
		m.proc = p
	}
	var err error
	e.cli, err = clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err = e.Leader(ctx); err == nil {
			return e, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("etcd has no leader: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Endpoints returns the members' client addresses.
func (e *Etcd) Endpoints() []string {
	var eps []string
	for _, m := range e.Members {
		eps = append(eps, m.ClientAddr)
	}
	return eps
}

// Leader returns the index of the member that is leader, as a member that is up reports it.
func (e *Etcd) Leader(ctx context.Context) (int, error) {
	var last error
	for _, m := range e.Members {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := e.cli.Status(sctx, m.ClientAddr)
		cancel()
		if err != nil {
			last = err
			continue
		}
		if st.Leader == 0 {
			last = fmt.Errorf("%s knows no leader", m.Name)
			continue
		}
		for i, o := range e.Members {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			ost, err := e.cli.Status(sctx, o.ClientAddr)
			cancel()
			if err == nil && ost.Header.MemberId == st.Leader {
				return i, nil
			}
		}
		last = fmt.Errorf("leader %x not reachable", st.Leader)
	}
	return 0, last
}

// Close closes the harness's client; the processes are stopped through Procs.
func (e *Etcd) Close() {
	if e.cli != nil {
		_ = e.cli.Close()
	}
}

// Stop stops every member.
func (e *Etcd) Stop() {
	e.Close()
	for _, m := range e.Members {
		m.proc.Stop(5 * time.Second)
	}
}

// freePort returns a loopback host:port nobody listens on now, or "" if none was found.
func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return ""
	}
	defer l.Close()
	return l.Addr().String()
}
