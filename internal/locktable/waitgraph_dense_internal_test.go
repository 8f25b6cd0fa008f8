package locktable

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// RocksDB's DeadlockStress (utilities/transactions/transaction_test.cc) with mixed modes, dense:
// every Txn locks every key, in an order of its own, one lock in four exclusive, with leases and
// timeouts of a minute, so that only deadlock detection can end a cycle in the test's time.
// Invariants: a key never has a writer beside another holder; every failure is a deadlock; and
// no cycle persists among waiting Txns (docs/DESIGN.md §13), which an oracle checks whenever
// progress stops: it builds the wait-for graph from the table's queues and their keys' holders
// (VisitWaits) and names the cycle it finds, rather than letting a missed one show only as a slow
// test.
func TestDeadlockStressDenseMixedModes(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), System)
	// Each worker commits commitsEach Txns, and goes on until the workers have met a deadlock:
	// without the race detector's slowdown, eight commits each can all pass without one. A bound
	// on attempts ends a run that never meets one, which then fails below.
	const keys, workers = 20, 10
	commitsEach, maxAttempts := stressCount(8, 64), stressCount(1000, 8000)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var readers, writers [keys]atomic.Int32
	var progress, grants, deadlocks, violations atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{}) // every worker starts at once, so that their Txns overlap
	for w := range workers {
		wg.Go(func() {
			<-start
			r := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for attempt, commits := 0, 0; (commits < commitsEach || deadlocks.Load() == 0) && attempt < maxAttempts && ctx.Err() == nil; attempt++ {
				txn := &testTxn{l: l, name: fmt.Sprintf("w%d-%d", w, attempt)}
				held := map[int]bool{} // key → held exclusively
				ok := true
				for _, k := range r.Perm(keys) {
					excl := r.IntN(4) == 0
					opts := testOptions{Shared: !excl, Lease: time.Minute, Timeout: time.Minute}
					_, err := txn.Lock(ctx, fmt.Appendf(nil, "key%03d", k), opts)
					progress.Add(1)
					if err != nil {
						if ctx.Err() == nil && !assert.True(t, isDeadlock(err), "%v", err) {
							violations.Add(1)
						}
						deadlocks.Add(1)
						ok = false
						break
					}
					grants.Add(1)
					held[k] = excl
					if excl {
						if writers[k].Add(1) != 1 || readers[k].Load() != 0 {
							violations.Add(1)
						}
					} else if readers[k].Add(1); writers[k].Load() != 0 {
						violations.Add(1)
					}
				}
				for k, excl := range held {
					if excl {
						writers[k].Add(-1)
					} else {
						readers[k].Add(-1)
					}
				}
				if ok {
					commits++
				}
				txn.Rollback()
				progress.Add(1)
			}
		})
	}
	close(start)
	oracleDone := make(chan struct{})
	go func() {
		defer close(oracleDone)
		if cycle := watchForStuckCycle(ctx, l, &progress); cycle != "" {
			t.Errorf("no cycle may persist among waiting Txns, yet one did for %v with no progress: %s", stuckFor, cycle)
			stop() // end the workers' waits now rather than at their one-minute timeouts
		}
	}()
	wg.Wait()
	stop()
	<-oracleDone
	t.Logf("%d grants checked, %d deadlocks", grants.Load(), deadlocks.Load())
	assert.Zero(t, violations.Load(), "a key had a writer beside another holder, or a failure was not a deadlock")
	assert.Positive(t, deadlocks.Load(), "no deadlock happened: the stress exercised nothing")
	assert.True(t, ProbeTableEmpty(l))
}

// stuckFor is how long a cycle must stay in the wait-for graph, with no lock call returning
// meanwhile, before the oracle calls it missed. A cycle is legitimately present only between a
// Txn's queueing and its check, a moment; a missed one stays until a lease or timeout ends it.
const stuckFor = time.Second

// watchForStuckCycle polls progress until ctx is done. Whenever it stops moving, it reads the
// wait-for graph from l's table; a cycle that is still there after stuckFor of no progress is
// returned, described, and "" once ctx is done.
func watchForStuckCycle(ctx context.Context, l *testLocker, progress *atomic.Int64) string {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	last, since := progress.Load(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return ""
		case <-tick.C:
		}
		if p := progress.Load(); p != last {
			last, since = p, time.Now()
			continue
		}
		if time.Since(since) < 100*time.Millisecond {
			continue
		}
		cycle := waitForCycle(readWaits(l.tab))
		if cycle == "" || progress.Load() != last {
			continue
		}
		if time.Since(since) >= stuckFor {
			return cycle
		}
	}
}

// waitRow is a queued request or a holder as waitForCycle reads them.
type waitRow struct {
	key, owner      string
	shared, upgrade bool
}

// readWaits reads, shard by shard, every request queued in tab, oldest first per key, and the
// holders of their keys.
func readWaits(tab *Table) (holders, waits []waitRow) {
	row := func(s Snapshot, shared, upgrade bool) waitRow {
		r := waitRow{key: string(s.Key), shared: shared, upgrade: upgrade}
		if s.Owner != nil {
			r.owner = s.Owner.Name()
		}
		return r
	}
	for i := range ShardCount {
		tab.VisitWaits(i, func(q QueuedRequest) { waits = append(waits, row(q.Request, q.Shared, q.Upgrade)) },
			func(s Snapshot, _ int) { holders = append(holders, row(s, s.Shared(), false)) })
	}
	return holders, waits
}

// waitForCycle builds the wait-for graph of Txns from a reading of the table's holders and queues
// and returns a cycle of it, described as "owner waits for key → owner ...", or "". A request waits for every
// holder of its key whose mode conflicts with it (an upgrade's own share does not count) and for
// every conflicting request queued ahead of it: every one for an exclusive request, the exclusive
// ones for a shared request. waits lists each key's requests oldest first.
func waitForCycle(locks, waits []waitRow) string {
	type request struct {
		owner  string
		shared bool
	}
	holders := map[string][]request{}
	for _, h := range locks {
		holders[h.key] = append(holders[h.key], request{h.owner, h.shared})
	}
	edges := map[string][]string{}
	waitsOn := map[string]string{}
	queued := map[string][]request{}
	for _, w := range waits {
		k := w.key
		shared := w.shared && !w.upgrade
		if w.owner == "" { // a wait outside any Txn ends by its timeout: no edge
			queued[k] = append(queued[k], request{"", shared})
			continue
		}
		conflicts := func(o request) bool { return o.owner != w.owner && (!shared || !o.shared) }
		for _, o := range holders[k] {
			if conflicts(o) && o.owner != "" {
				edges[w.owner] = append(edges[w.owner], o.owner)
			}
		}
		if !w.upgrade {
			for _, o := range queued[k] {
				if conflicts(o) && o.owner != "" {
					edges[w.owner] = append(edges[w.owner], o.owner)
				}
			}
		}
		queued[k] = append(queued[k], request{w.owner, shared})
		waitsOn[w.owner] = k
	}
	// Depth-first search with colours: a grey node reached again closes a cycle.
	const white, grey, black = 0, 1, 2
	colour := map[string]int{}
	var path []string
	var visit func(o string) []string
	visit = func(o string) []string {
		colour[o] = grey
		path = append(path, o)
		for _, next := range edges[o] {
			switch colour[next] {
			case grey:
				return slices.Clone(path[slices.Index(path, next):])
			case white:
				if _, waiting := waitsOn[next]; waiting {
					if c := visit(next); c != nil {
						return c
					}
				}
			}
		}
		path = path[:len(path)-1]
		colour[o] = black
		return nil
	}
	owners := make([]string, 0, len(waitsOn))
	for o := range waitsOn {
		owners = append(owners, o)
	}
	slices.Sort(owners)
	for _, o := range owners {
		if o == "" || colour[o] != white {
			continue
		}
		if c := visit(o); c != nil {
			var b strings.Builder
			for _, x := range c {
				fmt.Fprintf(&b, "%s waits for %s → ", x, waitsOn[x])
			}
			b.WriteString(c[0])
			return b.String()
		}
	}
	return ""
}
