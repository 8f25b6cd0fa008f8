package etcdcoord_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Shared cluster locks on one 3-member cluster beside etcd's concurrency.Mutex, which has no
// shared mode, so its readers take it exclusive. As in bench_cluster_test.go, each iteration
// runs etcdcoord's phases and the Mutex's in turn, so both see the same load.

// readers are nodes of one cluster with a stored record, hot, that each reads under its lock,
// and a Mutex session per node and goroutine: a concurrency.Mutex is one waiter, and the
// Mutexes of one session share its key.
type readers struct {
	nodes []*node
	mus   [][]*concurrency.Mutex // by node, then goroutine
	ros   []*grocksdb.ReadOptions
}

// hot is the record every reader and writer locks.
const hot = "hot"

// readOpts lock hot shared, writeOpts exclusive, with a lease the node's etcd lease covers
// without a refresh per lock, and long enough that a reader descheduled on a loaded host
// between its grant and joining the round still joins it: with recordlock.MinLease, such a
// Lock fails with recordlock.ErrClusterUnavailable.
var (
	readOpts  = sharedCluster(time.Second, 10*time.Second)
	writeOpts = cluster(time.Second, 10*time.Second)
)

// newReaders starts a cluster and names nodes on it, with perNode Mutex sessions each on
// mutexKey, and takes one shared lock of hot on each node so that its delegation is warm.
func newReaders(b *testing.B, names []string, perNode int, mutexKey string) *readers {
	ec := startCluster(b)
	r := &readers{}
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	for _, name := range names {
		n := newNode(b, nil, name, nodeConfig{endpoints: ec.endpoints()})
		if err := n.db.Put(wo, []byte(hot), []byte("value of "+name)); err != nil {
			b.Fatal(err)
		}
		ro := grocksdb.NewDefaultReadOptions()
		b.Cleanup(ro.Destroy)
		var mus []*concurrency.Mutex
		for range perNode {
			s, err := concurrency.NewSession(n.cli, concurrency.WithTTL(60))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			mus = append(mus, concurrency.NewMutex(s, mutexKey))
		}
		r.nodes, r.mus, r.ros = append(r.nodes, n), append(r.mus, mus), append(r.ros, ro)
	}
	for i := range r.nodes {
		if err := r.read(i); err != nil {
			b.Fatal(err)
		}
	}
	return r
}

// read is one reader's turn on node i through etcdcoord: a shared lock, a read, Release.
func (r *readers) read(i int) error {
	h, err := r.nodes[i].l.Lock(context.Background(), []byte(hot), readOpts)
	if err != nil {
		return err
	}
	_, err = r.nodes[i].db.GetBytes(r.ros[i], []byte(hot))
	h.Release()
	return err
}

// readMutex is the same turn through goroutine g's Mutex of node i.
func (r *readers) readMutex(i, g int) error {
	ctx := context.Background()
	m := r.mus[i][g]
	if err := m.Lock(ctx); err != nil {
		return err
	}
	_, err := r.nodes[i].db.GetBytes(r.ros[i], []byte(hot))
	if uerr := m.Unlock(ctx); err == nil {
		err = uerr
	}
	return err
}

// requests is the sum of the nodes' Stats.Requests; recalls, of their recalls sent and received.
func (r *readers) requests() (requests, recalls uint64) {
	for _, n := range r.nodes {
		s := n.coord.Stats()
		requests += s.Requests
		recalls += s.RecallsSent + s.RecallsReceived
	}
	return requests, recalls
}

// loops runs op on perNode goroutines of each node in nodes until stop is closed, and counts
// each node's completed ops. wait returns the counts once every goroutine has ended.
type loops struct {
	wg     sync.WaitGroup
	counts []atomic.Int64 // by position in nodes
	failed atomic.Pointer[error]
}

func startLoops(nodes []int, perNode int, stop <-chan struct{}, op func(node, g int) error) *loops {
	ls := &loops{counts: make([]atomic.Int64, len(nodes))}
	for p, i := range nodes {
		for g := range perNode {
			ls.wg.Add(1)
			go func() {
				defer ls.wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := op(i, g); err != nil {
						ls.failed.CompareAndSwap(nil, &err)
						return
					}
					ls.counts[p].Add(1)
				}
			}()
		}
	}
	return ls
}

func (ls *loops) wait(b *testing.B) []int64 {
	ls.wg.Wait()
	if err := ls.failed.Load(); err != nil {
		b.Fatal(*err)
	}
	counts := make([]int64, len(ls.counts))
	for i := range ls.counts {
		counts[i] = ls.counts[i].Load()
	}
	return counts
}

// phase runs op on perNode goroutines of each node in nodes for d and returns each node's count
// of completed ops, the wall time until the last goroutine ended, and the process's CPU time
// meanwhile.
func phase(b *testing.B, nodes []int, perNode int, d time.Duration, op func(node, g int) error) (counts []int64, wall, cpu time.Duration) {
	cpu0 := cpuTime(b)
	start := time.Now()
	stop := make(chan struct{})
	ls := startLoops(nodes, perNode, stop, op)
	time.Sleep(d)
	close(stop)
	counts = ls.wait(b)
	return counts, time.Since(start), cpuTime(b) - cpu0
}

// cpuTime is the CPU time the process has used, user and system: the embedded etcd members'
// included.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rates accumulates a phase's completed ops per node and its time.
type rates struct {
	ops       []int64
	wall, cpu time.Duration
}

func (r *rates) add(counts []int64, wall, cpu time.Duration) {
	if r.ops == nil {
		r.ops = make([]int64, len(counts))
	}
	for i, c := range counts {
		r.ops[i] += c
	}
	r.wall += wall
	r.cpu += cpu
}

// rate is node i's ops per second.
func (r *rates) rate(i int) float64 { return float64(r.ops[i]) / r.wall.Seconds() }

func (r *rates) total() int64 {
	var sum int64
	for _, c := range r.ops {
		sum += c
	}
	return sum
}

// cpuPerOp is the process's CPU time per op, in µs.
func (r *rates) cpuPerOp() float64 { return float64(r.cpu) / 1e3 / float64(r.total()) }

// Three nodes read one hot record under shared cluster locks, each with 2 goroutines taking
// Lock, a read of the record from its RocksDB and Release in a loop. Each iteration runs four
// phases of readPhase each: one node reading alone (the nodes take turns), all three at once,
// and the same two with the Mutex, which each reader takes exclusive; odd iterations run the
// three-node phase first. Reports etcdcoord's and the Mutex's locks/s of the node alone
// (alone-locks/s) and of each node among three (a-, b-, c-locks/s), each node's rate over the
// alone rate at its lowest (ratio-min) and the three nodes' sum over it (ratio-sum), the
// process's CPU time per lock in each phase (the etcd members' included), and the etcd requests
// the coordinators sent per lock once warm (etcd-req/lock), with their count (etcd-req) and
// that of the recalls they sent and received (recalls).
// -benchtime 20s runs about 80 iterations.
func BenchmarkSharedReadersThreeNodes(b *testing.B) {
	const readPhase = 50 * time.Millisecond
	const perNode = 2
	r := newReaders(b, []string{"a", "b", "c"}, perNode, "/bench-mutex/"+hot)
	all := []int{0, 1, 2}
	var coordAlone, coordThree, mutexAlone, mutexThree rates
	var requests, recalls uint64
	coordPhase := func(nodes []int, into *rates) {
		reqs0, recalls0 := r.requests()
		into.add(phase(b, nodes, perNode, readPhase, func(i, _ int) error { return r.read(i) }))
		reqs1, recalls1 := r.requests()
		requests, recalls = requests+reqs1-reqs0, recalls+recalls1-recalls0
	}
	mutexPhase := func(nodes []int, into *rates) {
		into.add(phase(b, nodes, perNode, readPhase, r.readMutex))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		alone := []int{i % 3}
		if i%2 == 0 {
			coordPhase(alone, &coordAlone)
			coordPhase(all, &coordThree)
			mutexPhase(alone, &mutexAlone)
			mutexPhase(all, &mutexThree)
		} else {
			coordPhase(all, &coordThree)
			coordPhase(alone, &coordAlone)
			mutexPhase(all, &mutexThree)
			mutexPhase(alone, &mutexAlone)
		}
		i++
	}
	report := func(side string, alone, three *rates) {
		aloneRate := float64(alone.total()) / alone.wall.Seconds()
		b.ReportMetric(aloneRate, side+"-alone-locks/s")
		lowest, sum := three.rate(0), 0.0
		for j, name := range []string{"a", "b", "c"} {
			b.ReportMetric(three.rate(j), fmt.Sprintf("%s-%s-locks/s", side, name))
			lowest = min(lowest, three.rate(j))
			sum += three.rate(j)
		}
		b.ReportMetric(lowest/aloneRate, side+"-ratio-min")
		b.ReportMetric(sum/aloneRate, side+"-ratio-sum")
		b.ReportMetric(alone.cpuPerOp(), side+"-alone-cpu-µs/lock")
		b.ReportMetric(three.cpuPerOp(), side+"-three-cpu-µs/lock")
	}
	report("coord", &coordAlone, &coordThree)
	report("mutex", &mutexAlone, &mutexThree)
	b.ReportMetric(float64(requests)/float64(coordAlone.total()+coordThree.total()), "etcd-req/lock")
	b.ReportMetric(float64(requests), "etcd-req")
	b.ReportMetric(float64(recalls), "recalls")
}

// Readers on three nodes, 2 goroutines each, take shared locks of one hot record in a loop: a
// Lock, a read of the record, Release, then a pause (readerPause, which sleeps about 1 ms on a
// Linux host), so that the readers of three nodes in one process leave the cores to etcd and
// the hand-off, as readers on three machines would. A writer on a fourth node takes the record
// exclusive once per iteration, once every reader has locked it since the readers started and
// a random time under etcd's 100 ms watch resync period has passed, so that the Mutex writer
// does not arrive in step with it; the latency is from its Lock call to the grant. The Mutex
// side runs the same readers and writer on one Mutex, the readers taking it exclusive, in the
// same iteration. Reports the writer's latency percentiles in ms, etcdcoord's over the Mutex's
// at p50 and p99, and the etcd requests the four coordinators sent per iteration
// (etcd-req/write): the writer's recall and grant, the hand-backs, the readers' asks while the
// writer waits, and their getting the record back after it. -benchtime 20s runs about 60
// iterations.
func BenchmarkWriterAmongReaders(b *testing.B) {
	const perNode = 2
	const readerPause = 100 * time.Microsecond
	r := newReaders(b, []string{"a", "b", "c", "w"}, perNode, "/bench-mutex/"+hot)
	readerNodes := []int{0, 1, 2}
	const writer = 3
	ctx := context.Background()
	var coordLat, mutexLat []time.Duration
	var requests uint64
	// readersRunning starts the readers and returns, once each reader goroutine has completed
	// a turn and the random time has passed, the func that stops them.
	readersRunning := func(op func(i, g int) error) func() {
		stop := make(chan struct{})
		var turns [3][perNode]atomic.Bool
		ls := startLoops(readerNodes, perNode, stop, func(i, g int) error {
			if err := op(i, g); err != nil {
				return err
			}
			turns[i][g].Store(true)
			time.Sleep(readerPause)
			return nil
		})
		for i := range turns {
			for g := range turns[i] {
				for !turns[i][g].Load() && ls.failed.Load() == nil {
					time.Sleep(50 * time.Microsecond)
				}
			}
		}
		time.Sleep(rand.N(100 * time.Millisecond))
		return func() {
			close(stop)
			ls.wait(b)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		before, _ := r.requests()
		stop := readersRunning(func(i, _ int) error { return r.read(i) })
		start := time.Now()
		h, err := r.nodes[writer].l.Lock(ctx, []byte(hot), writeOpts)
		if err != nil {
			b.Fatal(err)
		}
		coordLat = append(coordLat, time.Since(start))
		_, err = r.nodes[writer].db.GetBytes(r.ros[writer], []byte(hot))
		h.Release()
		if err != nil {
			b.Fatal(err)
		}
		stop()
		after, _ := r.requests()
		requests += after - before

		stop = readersRunning(r.readMutex)
		m := r.mus[writer][0]
		start = time.Now()
		if err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		mutexLat = append(mutexLat, time.Since(start))
		_, err = r.nodes[writer].db.GetBytes(r.ros[writer], []byte(hot))
		if uerr := m.Unlock(ctx); uerr != nil {
			b.Fatal(uerr)
		}
		if err != nil {
			b.Fatal(err)
		}
		stop()
	}
	reportSideBySide(b, coordLat, mutexLat, nil, nil)
	b.ReportMetric(float64(requests)/float64(len(coordLat)), "etcd-req/write")
}
