package etcdcoord_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/recordlock/recordlock"
)

// benchOpts lock with the shortest lease, so that the admissions a delegation keeps for
// recalls are let go quickly.
var benchOpts = cluster(recordlock.MinLease, 10*time.Second)

// A repeat Lock+Release of a key this node already holds a delegation for: no etcd request.
func BenchmarkRepeatLock(b *testing.B) {
	n := newNode(b, startEtcd(b), "a", nodeConfig{})
	ctx := context.Background()
	key := []byte("k")
	h, err := n.l.Lock(ctx, key, benchOpts)
	if err != nil {
		b.Fatal(err)
	}
	h.Release()
	before := n.reqs.snapshot()
	b.ReportAllocs()
	for b.Loop() {
		h, err := n.l.Lock(ctx, key, benchOpts)
		if err != nil {
			b.Fatal(err)
		}
		h.Release()
	}
	requests := 0
	for _, v := range n.reqs.since(before) {
		requests += v
	}
	b.ReportMetric(float64(requests), "etcd-requests")
}

// Repeat locks of distinct delegated keys from parallel goroutines of one node.
func BenchmarkRepeatLockParallel(b *testing.B) {
	n := newNode(b, startEtcd(b), "a", nodeConfig{})
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		key := []byte(fmt.Sprintf("k%d", next.Add(1)))
		for pb.Next() {
			h, err := n.l.Lock(ctx, key, benchOpts)
			if err != nil {
				b.Error(err)
				return
			}
			h.Release()
		}
	})
}

// A Lock+Release of a key nobody holds: one Txn creates the delegation.
func BenchmarkColdLock(b *testing.B) {
	n := newNode(b, startEtcd(b), "a", nodeConfig{})
	ctx := context.Background()
	h, err := n.l.Lock(ctx, []byte("warm-up"), benchOpts) // the node's lease and recall watch
	if err != nil {
		b.Fatal(err)
	}
	h.Release()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		h, err := n.l.Lock(ctx, []byte(fmt.Sprintf("cold-%d", i)), benchOpts)
		if err != nil {
			b.Fatal(err)
		}
		h.Release()
	}
}

// etcd's own concurrency.Mutex Lock+Unlock on the same embedded server, for comparison.
func BenchmarkEtcdMutex(b *testing.B) {
	n := newNode(b, startEtcd(b), "a", nodeConfig{})
	ctx := context.Background()
	s, err := concurrency.NewSession(n.cli, concurrency.WithTTL(60))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	m := concurrency.NewMutex(s, "/bench-mutex/k")
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// Cross-node ping-pong on a 3-member cluster: nodes A and B lock and release one key in turn,
// so every Lock is a hand-off (recall, hand-back, new delegation). Reports the hand-off
// latency's percentiles; run with -benchtime=300x or more.
func BenchmarkHandoff(b *testing.B) {
	ec := startCluster(b)
	nodes := []*node{
		newNode(b, nil, "a", nodeConfig{endpoints: ec.endpoints()}),
		newNode(b, nil, "b", nodeConfig{endpoints: ec.endpoints()}),
	}
	ctx := context.Background()
	key := []byte("k")
	opts := cluster(time.Second, 10*time.Second)
	for _, n := range nodes { // the nodes' leases and watches
		h, err := n.l.Lock(ctx, key, opts)
		if err != nil {
			b.Fatal(err)
		}
		h.Release()
	}
	var lat []time.Duration
	before := nodes[0].coord.Stats().RecallsReceived + nodes[1].coord.Stats().RecallsReceived
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		n := nodes[i%2]
		i++
		start := time.Now()
		h, err := n.l.Lock(ctx, key, opts)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		h.Release()
	}
	after := nodes[0].coord.Stats().RecallsReceived + nodes[1].coord.Stats().RecallsReceived
	if got := after - before; got != uint64(len(lat)) {
		b.Fatalf("%d hand-offs for %d locks", got, len(lat))
	}
	reportPercentiles(b, lat)
}

// etcd's concurrency.Mutex ping-pong on the same kind of cluster: two sessions on two clients
// lock and unlock one mutex in turn.
func BenchmarkEtcdMutexHandoff(b *testing.B) {
	ec := startCluster(b)
	nodes := []*node{
		newNode(b, nil, "a", nodeConfig{endpoints: ec.endpoints()}),
		newNode(b, nil, "b", nodeConfig{endpoints: ec.endpoints()}),
	}
	ctx := context.Background()
	var mus []*concurrency.Mutex
	for _, n := range nodes {
		s, err := concurrency.NewSession(n.cli, concurrency.WithTTL(60))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		mus = append(mus, concurrency.NewMutex(s, "/bench-mutex/k"))
	}
	var lat []time.Duration
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m := mus[i%2]
		i++
		start := time.Now()
		if err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		if err := m.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	reportPercentiles(b, lat)
}

// reportPercentiles reports the 50th, 90th and 99th percentile of lat in milliseconds.
func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	for _, p := range []int{50, 90, 99} {
		b.ReportMetric(float64(lat[(len(lat)-1)*p/100])/1e6, fmt.Sprintf("p%d-ms", p))
	}
}
