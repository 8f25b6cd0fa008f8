package etcdcoord_test

import (
	"context"
	"fmt"
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
