package etcdcoord_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordlock/recordlock"
)

// Transfers in opposite orders on two nodes of one etcd. Each round, a Txn on each node moves
// money between records A and B, and the round ends when both have committed. Lock: node a's Txn
// locks A and node b's locks B; once both hold their first record, each locks the other's, so
// every round deadlocks across the nodes; the victim rolls back and retries at once. Reports the
// time from the cycle forming (the later of the two second Locks being called) to the victim's
// ErrDeadlock at p50 and p99 (detect-p*-ms), and the victims per round. LockAll: each Txn locks
// both records with LockAll, in key order, and never deadlocks. Both report commits per second.
// Run with -benchtime=200x.
func BenchmarkOppositeOrderTransfers(b *testing.B) {
	b.Run("Lock", func(b *testing.B) { benchOppositeOrder(b, false) })
	b.Run("LockAll", func(b *testing.B) { benchOppositeOrder(b, true) })
}

func benchOppositeOrder(b *testing.B, lockAll bool) {
	e := startEtcd(b)
	nodes := [2]*node{newNode(b, e, "a", nodeConfig{}), newNode(b, e, "b", nodeConfig{})}
	keys := [2][]byte{[]byte("acct/A"), []byte("acct/B")}
	opts := cluster(10*time.Second, 20*time.Second)
	ctx := context.Background()
	for _, n := range nodes { // the nodes' leases and watches
		h, err := n.l.Lock(ctx, []byte("warm-up-"+n.name), opts)
		if err != nil {
			b.Fatal(err)
		}
		h.Release()
	}

	var (
		mu      sync.Mutex
		detect  []time.Duration
		victims int
		errs    []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	b.ReportAllocs()
	round := 0
	for b.Loop() {
		round++
		var wg sync.WaitGroup
		if lockAll {
			for i, n := range nodes {
				wg.Go(func() {
					txn := n.l.Begin()
					_, err := txn.LockAll(ctx, opts, keys[i], keys[1-i])
					if err == nil {
						err = transferIn(txn, keys[i], keys[1-i])
					}
					if err != nil {
						txn.Rollback()
						fail(err)
					}
				})
			}
			wg.Wait()
		} else {
			var held sync.WaitGroup
			held.Add(2)
			start := make(chan struct{})
			var called [2]atomic.Int64 // when each second Lock was called, in ns since the Unix epoch
			for i, n := range nodes {
				wg.Go(func() {
					first, second := keys[i], keys[1-i]
					for attempt := 0; ; attempt++ {
						txn := n.l.Begin()
						_, err := txn.Lock(ctx, first, opts)
						if attempt == 0 {
							held.Done()
							<-start
							called[i].Store(time.Now().UnixNano())
						}
						if err == nil {
							_, err = txn.Lock(ctx, second, opts)
						}
						if errors.Is(err, recordlock.ErrDeadlock) {
							at := time.Now().UnixNano()
							txn.Rollback()
							mu.Lock()
							if attempt == 0 {
								detect = append(detect, time.Duration(at-max(called[0].Load(), called[1].Load())))
							}
							victims++
							mu.Unlock()
							continue
						}
						if err == nil {
							err = transferIn(txn, first, second)
						}
						if err != nil {
							txn.Rollback()
							fail(err)
						}
						return
					}
				})
			}
			held.Wait()
			close(start)
			wg.Wait()
		}
		if len(errs) > 0 {
			b.Fatal(errs[0])
		}
	}
	b.ReportMetric(float64(2*round)/b.Elapsed().Seconds(), "commits/s")
	if lockAll {
		return
	}
	b.ReportMetric(float64(victims)/float64(round), "victims/round")
	if len(detect) > 0 {
		slices.Sort(detect)
		for _, p := range []int{50, 99} {
			b.ReportMetric(float64(detect[(len(detect)-1)*p/100])/1e6, fmt.Sprintf("detect-p%d-ms", p))
		}
	}
}

// transferIn moves one unit from one record to the other, as this node's database holds them,
// and commits.
func transferIn(txn *recordlock.Txn, from, to []byte) error {
	var bal [2]int
	for i, k := range [2][]byte{from, to} {
		v, err := txn.Get(k)
		if err != nil {
			return err
		}
		if v != nil {
			if bal[i], err = strconv.Atoi(string(v)); err != nil {
				return err
			}
		}
	}
	if err := txn.Put(from, []byte(strconv.Itoa(bal[0]-1))); err != nil {
		return err
	}
	if err := txn.Put(to, []byte(strconv.Itoa(bal[1]+1))); err != nil {
		return err
	}
	return txn.Commit()
}
