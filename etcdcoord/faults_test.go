package etcdcoord_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/etcdcoord"
)

// register is a record outside the nodes. Like any resource outside a node, it checks the
// fencing token: an access with a token lower than one it has seen is refused. Its seq numbers
// the accesses in the order they took effect.
type register struct {
	mu       sync.Mutex
	value    int
	maxToken uint64
	seq      int64
}

var errStaleToken = errors.New("test: stale fencing token")

// access reads the register, or writes v to it, under token.
func (r *register) access(token uint64, write bool, v int) (int, int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if token < r.maxToken {
		return 0, 0, errStaleToken
	}
	r.maxToken = token
	r.seq++
	if write {
		r.value = v
	}
	return r.value, r.seq, nil
}

// rmw is one fenced read-modify-write whose read and write both took effect.
type rmw struct {
	key, client       int
	call, ret         int64 // wall-clock nanoseconds around the fenced section
	read              int
	readSeq, writeSeq int64
}

// faultRun is the state of one run of the fault suite.
type faultRun struct {
	ec      *etcdCluster
	nodes   []*node
	proxies [][]*proxy // per node, its client's proxy to each member
	keys    []string
	regs    []*register
	occ     []atomic.Int32 // holders inside a fenced section, per key
	maxOcc  atomic.Int32
	// healed is true outside a fault's injection; maxHealed is maxOcc over those times only.
	healed    atomic.Bool
	maxHealed atomic.Int32
	// deletedAt is the revision that deleted the delegations; stale counts admissions after
	// the fault whose token is not above it, from a delegation etcd no longer had.
	deletedAt atomic.Int64
	stale     atomic.Int64

	mu      sync.Mutex
	ops     []rmw
	errs    map[string]int
	commits int
}

const (
	faultTTL   = 2 * time.Second
	faultSkew  = 500 * time.Millisecond
	faultLease = time.Second
)

// newFaultRun starts a 3-member cluster and three nodes, each a Locker over its own RocksDB
// whose etcd client reaches every member through a proxy of its own.
func newFaultRun(t *testing.T) *faultRun {
	fr := &faultRun{ec: startCluster(t), keys: []string{"k0", "k1", "k2"}, errs: map[string]int{}}
	fr.regs = make([]*register, len(fr.keys))
	for i := range fr.regs {
		fr.regs[i] = &register{}
	}
	fr.occ = make([]atomic.Int32, len(fr.keys))
	for i := range 3 {
		var eps []string
		var ps []*proxy
		for _, m := range fr.ec.members {
			p := newProxy(t, m.client, false)
			ps = append(ps, p)
			eps = append(eps, p.addr())
		}
		fr.proxies = append(fr.proxies, ps)
		fr.nodes = append(fr.nodes, newNode(t, nil, fmt.Sprintf("node-%d", i), nodeConfig{endpoints: eps, faulty: true, opts: []etcdcoord.Option{
			etcdcoord.WithTTL(faultTTL), etcdcoord.WithSkew(faultSkew), etcdcoord.WithRequestTimeout(time.Second),
		}}))
	}
	return fr
}

func (fr *faultRun) cutClient(i int) {
	for _, p := range fr.proxies[i] {
		p.cut()
	}
}

func (fr *faultRun) healClient(i int) {
	for _, p := range fr.proxies[i] {
		p.heal()
	}
}

// work locks random keys on node n and runs a fenced read-modify-write of the key's register
// and of the node's own replica of the record, until stop closes.
func (fr *faultRun) work(t *testing.T, n *node, client int, stop <-chan struct{}) {
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	rng := rand.New(rand.NewPCG(uint64(client), 12))
	for {
		select {
		case <-stop:
			return
		default:
		}
		i := rng.IntN(len(fr.keys))
		h, err := n.l.Lock(context.Background(), []byte(fr.keys[i]), cluster(faultLease, 3*time.Second))
		if err != nil {
			fr.fail(err)
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if del := fr.deletedAt.Load(); del != 0 && fr.healed.Load() && h.Token() <= uint64(del) {
			fr.stale.Add(1)
		}
		var op rmw
		err = h.Fence(func() error {
			occ := fr.occ[i].Add(1)
			defer fr.occ[i].Add(-1)
			raise(&fr.maxOcc, occ)
			if fr.healed.Load() {
				raise(&fr.maxHealed, occ)
			}
			op = rmw{key: i, client: client, call: time.Now().UnixNano()}
			v, seq, err := fr.regs[i].access(h.Token(), false, 0)
			if err != nil {
				return err
			}
			op.read, op.readSeq = v, seq
			time.Sleep(time.Millisecond) // the work between read and write
			if err := n.db.Put(wo, []byte(fr.keys[i]), []byte(strconv.Itoa(v+1))); err != nil {
				return err
			}
			_, op.writeSeq, err = fr.regs[i].access(h.Token(), true, v+1)
			op.ret = time.Now().UnixNano()
			return err
		})
		h.Release()
		if err != nil {
			fr.fail(err)
			continue
		}
		fr.mu.Lock()
		fr.ops = append(fr.ops, op)
		fr.commits++
		fr.mu.Unlock()
	}
}

// raise sets m to v if v is greater.
func raise(m *atomic.Int32, v int32) {
	for cur := m.Load(); v > cur && !m.CompareAndSwap(cur, v); cur = m.Load() {
	}
}

// fail counts a failure by its kind.
func (fr *faultRun) fail(err error) {
	kind := "other: " + err.Error()
	for _, k := range []struct {
		err  error
		name string
	}{
		{errStaleToken, "stale token refused by the register"},
		{recordlock.ErrLeaseExpired, "ErrLeaseExpired"},
		{recordlock.ErrTimeout, "ErrTimeout"},
		{recordlock.ErrClusterUnavailable, "ErrClusterUnavailable"},
	} {
		if errors.Is(err, k.err) {
			kind = k.name
			break
		}
	}
	fr.mu.Lock()
	fr.errs[kind]++
	fr.mu.Unlock()
}

// check verifies the history two ways: no two read-modify-writes of a key that both took effect
// interleave, and each key's register is linearizable. It returns a one-line summary.
func (fr *faultRun) check(t *testing.T) string {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	byKey := make([][]porcupine.Operation, len(fr.keys))
	seqs := make([][]rmw, len(fr.keys))
	for _, op := range fr.ops {
		byKey[op.key] = append(byKey[op.key], porcupine.Operation{
			ClientId: op.client, Call: op.call, Return: op.ret, Output: op.read,
		})
		seqs[op.key] = append(seqs[op.key], op)
	}
	interleaved := 0
	for _, ops := range seqs {
		sort.Slice(ops, func(a, b int) bool { return ops[a].readSeq < ops[b].readSeq })
		for j := 1; j < len(ops); j++ {
			if ops[j].readSeq < ops[j-1].writeSeq {
				interleaved++
			}
		}
	}
	assert.Zero(t, interleaved, "read-modify-writes that interleaved")
	model := porcupine.Model{
		Init: func() any { return 0 },
		Step: func(state, _, output any) (bool, any) {
			return output.(int) == state.(int), state.(int) + 1
		},
	}
	linearizable := true
	for i, ops := range byKey {
		if r := porcupine.CheckOperationsTimeout(model, ops, 30*time.Second); r != porcupine.Ok {
			linearizable = false
			t.Errorf("key %s: porcupine says %v over %d operations", fr.keys[i], r, len(ops))
		}
	}
	return fmt.Sprintf("interleaved %d, linearizable %v, max holders in a fence at once %d (%d outside the fault)",
		interleaved, linearizable, fr.maxOcc.Load(), fr.maxHealed.Load())
}

// faults are the runs of the suite: each injects its fault while the nodes work and heals it.
var faults = []struct {
	name string
	// inject runs the fault and returns once it is healed.
	inject func(t *testing.T, fr *faultRun)
	// overlap: holders may overlap for a moment, because etcd itself let the key go to
	// another node before the holder could hear of it; the tokens must then keep them apart.
	overlap bool
}{
	{name: "leader killed and restarted", inject: func(t *testing.T, fr *faultRun) {
		l := fr.ec.leader()
		fr.ec.kill(l)
		time.Sleep(2500 * time.Millisecond)
		fr.ec.restart(l)
	}},
	{name: "member isolated from the quorum", inject: func(t *testing.T, fr *faultRun) {
		l := fr.ec.leader()
		fr.ec.isolate(l)
		time.Sleep(2500 * time.Millisecond)
		fr.ec.heal()
	}},
	{name: "node client cut and healed", inject: func(t *testing.T, fr *faultRun) {
		fr.cutClient(0)
		time.Sleep(faultTTL + 1500*time.Millisecond) // past the node's etcd lease
		fr.healClient(0)
	}},
	{name: "delegation prefix deleted", overlap: true, inject: func(t *testing.T, fr *faultRun) {
		resp, err := fr.nodes[1].cli.Delete(context.Background(), "/recordlock/x/", clientv3.WithPrefix())
		require.NoError(t, err)
		fr.deletedAt.Store(resp.Header.Revision)
		time.Sleep(time.Second)
	}},
	{name: "compaction while a node is cut off", inject: func(t *testing.T, fr *faultRun) {
		fr.cutClient(0)
		time.Sleep(time.Second) // the others make revisions node 0 does not see
		resp, err := fr.nodes[1].cli.Get(context.Background(), "compact")
		require.NoError(t, err)
		_, err = fr.nodes[1].cli.Compact(context.Background(), resp.Header.Revision)
		require.NoError(t, err)
		time.Sleep(500 * time.Millisecond)
		fr.healClient(0)
	}},
}

// The fault suite: three nodes over a 3-member cluster lock three keys from two goroutines each
// while one fault is injected and healed, once per run (repeatedly with -long). Invariants: no
// two read-modify-writes of a key that both took effect interleave; each key's register is
// linearizable; at most one holder is inside a fenced section of a key at any instant (while the
// delegations are being deleted, only outside that moment); once the fault is over nothing is
// admitted from a deleted delegation; afterwards every node can lock every key.
func TestFaults(t *testing.T) {
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			fr := newFaultRun(t)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for i, n := range fr.nodes {
				for g := range 2 {
					wg.Go(func() { fr.work(t, n, 2*i+g, stop) })
				}
			}
			cycles := 1
			if *long {
				cycles = 5
			}
			fr.healed.Store(true)
			for range cycles {
				time.Sleep(time.Second)
				fr.healed.Store(false)
				f.inject(t, fr)
				fr.healed.Store(true)
			}
			time.Sleep(2 * time.Second) // working after the heal
			close(stop)
			wg.Wait()

			summary := fr.check(t)
			if !f.overlap {
				assert.LessOrEqual(t, fr.maxOcc.Load(), int32(1), "holders of one key inside a fence at once")
			}
			assert.LessOrEqual(t, fr.maxHealed.Load(), int32(1), "holders of one key inside a fence at once, outside the fault")
			var recalls, handBacks, restarts, lost uint64
			for _, n := range fr.nodes {
				s := n.coord.Stats()
				recalls += s.RecallsReceived
				handBacks += s.HandBacks
				restarts += s.WatchRestarts
				lost += s.Lost
			}
			assert.Zero(t, fr.stale.Load(), "admissions from deleted delegations after the fault")
			fr.mu.Lock()
			var errs []string
			for k, v := range fr.errs {
				errs = append(errs, fmt.Sprintf("%s %d", k, v))
				assert.False(t, strings.HasPrefix(k, "other"), "unexpected failure %s", k)
			}
			sort.Strings(errs)
			t.Logf("%s: %d commits, %d recalls, %d hand-backs, %d delegations lost, %d watch restarts; failures: %s; %s",
				f.name, fr.commits, recalls, handBacks, lost, restarts, strings.Join(errs, ", "), summary)
			assert.Positive(t, fr.commits)
			fr.mu.Unlock()

			for _, n := range fr.nodes {
				for _, k := range fr.keys {
					h, err := n.l.Lock(context.Background(), []byte(k), cluster(faultLease, 30*time.Second))
					if assert.NoError(t, err, "%s locks %s after the fault", n.name, k) {
						assert.NoError(t, h.Fence(func() error { return nil }))
						h.Release()
					}
				}
			}
		})
	}
}
