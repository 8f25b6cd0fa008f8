package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/recordlock/recordlock/jepsen/nemesis"
	"github.com/recordlock/recordlock/jepsen/resource"
)

// Config is one system's run.
type Config struct {
	System    string // node.Recordlock or node.EtcdMutex
	Self      string // this program, which runs the node and resource roles too
	EtcdBin   string
	Dir       string // everything the run writes: data, logs, histories
	Members   int
	Nodes     int
	Clients   int // per node
	Keys      []string
	TTL       time.Duration
	Lease     time.Duration
	Hold      time.Duration
	Seed      uint64
	Duration  time.Duration
	Schedule  []nemesis.Fault
	NodeGrace time.Duration // how long a node is given to finish on SIGTERM
	// BankClients per node move money between Accounts (in key order), each of which starts
	// with Balance, and read them all.
	BankClients int
	Accounts    []string
	Balance     int64
}

// Cluster is a running system: etcd, the resource, the nodes and their proxies.
type Cluster struct {
	cfg      Config
	ps       *Procs
	etcd     *Etcd
	resource *Proc
	resAddr  string
	nodes    []*nodeProc
}

// nodeProc is one node process and its proxies.
type nodeProc struct {
	index       int
	incarnation int
	proc        *Proc
	proxies     nodeProxies
}

// Start starts every process of cfg under ps.
func Start(ctx context.Context, ps *Procs, cfg Config) (*Cluster, error) {
	c := &Cluster{cfg: cfg, ps: ps}
	var err error
	if c.etcd, err = StartEtcd(ctx, ps, cfg.EtcdBin, cfg.Dir, cfg.Members); err != nil {
		return c, err
	}
	c.resAddr = freePort()
	if c.resource, err = ps.Start("resource", cfg.Self, []string{"resource", "-addr", c.resAddr},
		filepath.Join(cfg.Dir, "resource.log")); err != nil {
		return c, err
	}
	if err := waitResource(ctx, c.resAddr); err != nil {
		return c, err
	}
	if err := c.openAccounts(ctx); err != nil {
		return c, err
	}
	for i := range cfg.Nodes {
		n := &nodeProc{index: i}
		if n.proxies, err = startProxies(c.etcd.Endpoints()); err != nil {
			return c, err
		}
		c.nodes = append(c.nodes, n)
		if n.proc, err = ps.Start(fmt.Sprintf("node-%d", i), cfg.Self, c.nodeArgs(n),
			filepath.Join(cfg.Dir, fmt.Sprintf("node-%d.log", i))); err != nil {
			return c, err
		}
	}
	return c, nil
}

// HistoryPath is node i's history log.
func (c *Cluster) HistoryPath(i int) string {
	return filepath.Join(c.cfg.Dir, fmt.Sprintf("node-%d.history.jsonl", i))
}

// BankHistoryPath is node i's bank log.
func (c *Cluster) BankHistoryPath(i int) string {
	return filepath.Join(c.cfg.Dir, fmt.Sprintf("node-%d.bank.jsonl", i))
}

// openAccounts puts Balance in every account, unfenced, before any node starts.
func (c *Cluster) openAccounts(ctx context.Context) error {
	var ws []resource.Write
	for _, a := range c.cfg.Accounts {
		ws = append(ws, resource.Write{Key: a, Value: c.cfg.Balance})
	}
	if len(ws) == 0 {
		return nil
	}
	return resource.NewClient(c.resAddr).WriteAll(ctx, ws)
}

func (c *Cluster) nodeArgs(n *nodeProc) []string {
	cfg := c.cfg
	return []string{"node",
		"-system", cfg.System,
		"-index", strconv.Itoa(n.index),
		"-incarnation", strconv.Itoa(n.incarnation),
		"-endpoints", strings.Join(n.proxies.endpoints(), ","),
		"-db", filepath.Join(cfg.Dir, fmt.Sprintf("node-%d.rocksdb", n.index)),
		"-resource", c.resAddr,
		"-history", c.HistoryPath(n.index),
		"-clients", strconv.Itoa(cfg.Clients),
		"-keys", strings.Join(cfg.Keys, ","),
		"-ttl", cfg.TTL.String(),
		"-lease", cfg.Lease.String(),
		"-hold", cfg.Hold.String(),
		"-seed", strconv.FormatUint(cfg.Seed, 10),
		"-bank-history", c.BankHistoryPath(n.index),
		"-bank-clients", strconv.Itoa(cfg.BankClients),
		"-accounts", strings.Join(cfg.Accounts, ","),
	}
}

// Apply starts f and returns the func that heals it.
func (c *Cluster) Apply(ctx context.Context, f nemesis.Fault) (heal func() error, err error) {
	switch f.Kind {
	case nemesis.Pause, nemesis.LongPause:
		n := c.nodes[f.Node]
		if err := n.proc.Signal(syscall.SIGSTOP); err != nil {
			return nil, err
		}
		return func() error { return n.proc.Signal(syscall.SIGCONT) }, nil
	case nemesis.Kill:
		n := c.nodes[f.Node]
		n.proc.Kill()
		return func() error {
			n.incarnation++
			return n.proc.Restart(c.nodeArgs(n)...)
		}, nil
	case nemesis.LeaderKill:
		i, err := c.etcd.Leader(ctx)
		if err != nil {
			return nil, err
		}
		m := c.etcd.Members[i]
		m.proc.Kill()
		return func() error { return m.proc.Restart() }, nil
	case nemesis.Partition:
		n := c.nodes[f.Node]
		n.proxies.blackhole()
		return func() error { n.proxies.heal(); return nil }, nil
	case nemesis.Delay:
		n := c.nodes[f.Node]
		n.proxies.delay(f.Latency)
		return func() error { n.proxies.heal(); return nil }, nil
	}
	return nil, fmt.Errorf("unknown fault %q", f.Kind)
}

// StopNodes stops every node: resumed, asked to finish, killed past the grace period. It
// returns how many times nodes exited without the harness asking.
func (c *Cluster) StopNodes() int {
	crashes := 0
	for _, n := range c.nodes {
		if n.proc == nil {
			continue
		}
		n.proxies.heal()
		crashes += n.proc.Unplanned()
		n.proc.Stop(c.cfg.NodeGrace)
	}
	return crashes
}

// FinalValues reads each of keys at the resource, unfenced.
func (c *Cluster) FinalValues(ctx context.Context, keys []string) (map[string]int64, error) {
	cli := resource.NewClient(c.resAddr)
	final := make(map[string]int64)
	for _, k := range keys {
		v, err := cli.Read(ctx, k, resource.Token{})
		if err != nil {
			return nil, err
		}
		final[k] = v
	}
	return final, nil
}

// Close stops what is left: the nodes (if StopNodes did not), the proxies, the resource and
// etcd.
func (c *Cluster) Close() {
	for _, n := range c.nodes {
		if n.proc != nil && !n.proc.Exited() {
			n.proc.Kill()
		}
		n.proxies.close()
	}
	if c.resource != nil {
		c.resource.Stop(2 * time.Second)
	}
	if c.etcd != nil {
		c.etcd.Stop()
	}
}

func waitResource(ctx context.Context, addr string) error {
	cli := resource.NewClient(addr)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := cli.Read(ctx, "ping", resource.Token{})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("resource did not start: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RemoveData removes the etcd data directories and the nodes' RocksDB databases, which a
// finished run no longer needs; the logs and histories stay.
func (c *Cluster) RemoveData() error {
	var errs []error
	for _, m := range c.etcd.Members {
		errs = append(errs, os.RemoveAll(filepath.Join(c.cfg.Dir, m.Name)))
	}
	for _, n := range c.nodes {
		errs = append(errs, os.RemoveAll(filepath.Join(c.cfg.Dir, fmt.Sprintf("node-%d.rocksdb", n.index))))
	}
	return errors.Join(errs...)
}
