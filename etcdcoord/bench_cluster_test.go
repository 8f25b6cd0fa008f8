package etcdcoord_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Cross-node latency on one 3-member cluster, etcdcoord and etcd's own concurrency.Mutex side by
// side: each iteration runs one round of each, so both see the same load on a shared machine.

// pair is two nodes of one cluster and, on the same two etcd clients, a Mutex session each.
type pair struct {
	nodes [2]*node
	mus   [2]*concurrency.Mutex
}

func newPair(b testing.TB) *pair {
	ec := startCluster(b)
	p := &pair{}
	for i, name := range []string{"a", "b"} {
		p.nodes[i] = newNode(b, nil, name, nodeConfig{endpoints: ec.endpoints()})
		s, err := concurrency.NewSession(p.nodes[i].cli, concurrency.WithTTL(60))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		p.mus[i] = concurrency.NewMutex(s, "/bench-mutex/k")
	}
	for _, n := range p.nodes { // the nodes' leases and watches
		h, err := n.l.Lock(context.Background(), []byte("warm-up-"+n.name), handoffOpts)
		if err != nil {
			b.Fatal(err)
		}
		h.Release()
	}
	return p
}

// handoffOpts lock with a lease the node's etcd lease covers without a refresh per lock.
var handoffOpts = cluster(time.Second, 10*time.Second)

// Two nodes lock and release one key in turn, so every Lock finds the key last held by the
// other node; the same for two Mutex sessions. Reports each one's Lock latency (lock-*) and
// Lock+Release cycle (cycle-*) percentiles in ms, and etcdcoord's over the Mutex's at p50 and
// p99. Run with -benchtime=500x.
func BenchmarkAlternatingNodes(b *testing.B) {
	p := newPair(b)
	ctx := context.Background()
	var coordLock, coordCycle, mutexLock, mutexCycle []time.Duration
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		n := p.nodes[i%2]
		start := time.Now()
		h, err := n.l.Lock(ctx, []byte("k"), handoffOpts)
		if err != nil {
			b.Fatal(err)
		}
		coordLock = append(coordLock, time.Since(start))
		h.Release()
		coordCycle = append(coordCycle, time.Since(start))

		m := p.mus[i%2]
		start = time.Now()
		if err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		mutexLock = append(mutexLock, time.Since(start))
		if err := m.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		mutexCycle = append(mutexCycle, time.Since(start))
		i++
	}
	reportSideBySide(b, coordLock, mutexLock, coordCycle, mutexCycle)
}

// One node holds the key while the other already waits for it; the latency is from the
// holder's Release to the waiter's admission. The waiter's recall is in etcd before the holder
// lets go; the Mutex waiter's key is, and its watch on the key ahead of it is open and caught
// up. Run with -benchtime=300x.
func BenchmarkNextNodeWaiting(b *testing.B) {
	p := newPair(b)
	ctx := context.Background()
	key := "k"
	h, err := p.nodes[0].l.Lock(ctx, []byte(key), handoffOpts)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.mus[0].Lock(ctx); err != nil {
		b.Fatal(err)
	}
	var coordLat, mutexLat []time.Duration
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		next := p.nodes[(i+1)%2]
		recalls := p.nodes[i%2].coord.Stats().RecallsReceived
		got := lockAsync(next, key, handoffOpts)
		// Wait until the holder has seen the recall, or the Lock has returned (an error, reported below).
		for p.nodes[i%2].coord.Stats().RecallsReceived == recalls && len(got) == 0 {
			time.Sleep(50 * time.Microsecond)
		}
		start := time.Now()
		h.Release()
		r := <-got
		if r.err != nil {
			b.Fatal(r.err)
		}
		coordLat = append(coordLat, time.Since(start))
		h = r.h

		nm := p.mus[(i+1)%2]
		watchers, _ := etcdWatchers(b)
		locked := make(chan error, 1)
		go func() { locked <- nm.Lock(ctx) }()
		waitForWaiters(b, p.nodes[0].cli, "/bench-mutex/k", 2)
		waitForSettledWatch(b, watchers)
		start = time.Now()
		if err := p.mus[i%2].Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := <-locked; err != nil {
			b.Fatal(err)
		}
		mutexLat = append(mutexLat, time.Since(start))
		i++
	}
	h.Release()
	if err := p.mus[i%2].Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	reportSideBySide(b, coordLat, mutexLat, nil, nil)
}

// etcdWatchers reads the embedded members' watch gauges: the watches open on them, and those
// still catching up from a past revision (etcd brings those up to date every 100 ms).
func etcdWatchers(b *testing.B) (open, catchingUp float64) {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "etcd_debugging_mvcc_watcher_total":
				open += m.GetGauge().GetValue()
			case "etcd_debugging_mvcc_slow_watcher_total":
				catchingUp += m.GetGauge().GetValue()
			}
		}
	}
	return open, catchingUp
}

// waitForSettledWatch blocks until the Mutex waiter's watch on the key ahead of it is open and
// caught up, so that it sees that key's deletion at once: it opens from a past revision, so it
// catches up first. before is the count of open watches when the waiter started; one left of a
// waiter before it may close meanwhile, so having seen a watch catch up counts too.
func waitForSettledWatch(b *testing.B, before float64) {
	caughtUp := false
	for {
		open, catchingUp := etcdWatchers(b)
		caughtUp = caughtUp || catchingUp > 0
		if catchingUp == 0 && (caughtUp || open > before) {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// waitForWaiters blocks until n Mutex keys are under prefix: the waiter has queued.
func waitForWaiters(b *testing.B, cli *clientv3.Client, prefix string, n int64) {
	for {
		resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			b.Fatal(err)
		}
		if resp.Count >= n {
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// reportSideBySide reports the percentiles of etcdcoord's and the Mutex's latencies in ms, and
// the ratio of etcdcoord's to the Mutex's at p50 and p99.
func reportSideBySide(b *testing.B, coordLock, mutexLock, coordCycle, mutexCycle []time.Duration) {
	if len(coordLock) == 0 {
		return
	}
	pct := func(lat []time.Duration, p int) float64 {
		lat = slices.Clone(lat)
		slices.Sort(lat)
		return float64(lat[(len(lat)-1)*p/100]) / 1e6
	}
	for _, p := range []int{50, 99} {
		b.ReportMetric(pct(coordLock, p), fmt.Sprintf("coord-p%d-ms", p))
		b.ReportMetric(pct(mutexLock, p), fmt.Sprintf("mutex-p%d-ms", p))
		b.ReportMetric(pct(coordLock, p)/pct(mutexLock, p), fmt.Sprintf("ratio-p%d", p))
		if coordCycle != nil {
			b.ReportMetric(pct(coordCycle, p), fmt.Sprintf("coord-cycle-p%d-ms", p))
			b.ReportMetric(pct(mutexCycle, p), fmt.Sprintf("mutex-cycle-p%d-ms", p))
		}
	}
}
