package etcdcoord_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/recordlock/recordlock"
)

// Transfers between accounts on three nodes of one etcd, several workers per node, each Txn
// locking its two accounts with cluster scope, one Lock at a time in a random order: opposite
// orders meet within a node and across nodes, and every deadlock must be broken by one victim
// that rolls back and retries at once. The balances live in a map of the test, written inside
// the Fence of both handles, so the total adds up only if no update is lost. Oracles:
//
//   - no lost update: the version of each account read after locking is the one found inside
//     the fences, the fencing token never goes back, one writer at a time per account, and the
//     total adds up after every commit and at the end;
//   - no false victim: each ErrDeadlock finds a cycle through its Txn in the test's own model
//     of the waits and holds, and every Txn its error names waits there for the record named;
//   - no cycle of the model lasts longer than a second and a half. A Lock may wait longer than
//     that behind a queue of transfers, so the time of each Lock is reported, not checked.
//
// A victim whose cycle in the model runs through a queue of one record and not only through
// holders is counted and logged apart: failing it does not break the deadlock, and a second
// victim follows. With -long it runs many more transfers.
func TestTransfersDeadlockAcrossNodes(t *testing.T) {
	e := startEtcd(t)
	nodes := make([]*node, 3)
	for i := range nodes {
		nodes[i] = newNode(t, e, fmt.Sprintf("n%d", i), nodeConfig{})
	}
	const accounts, workers, initial = 5, 4, 1000
	transfers := 10 // per worker
	if *long {
		transfers = 250
	}
	b := newBank(accounts, initial)
	m := newWaitModel()
	opts := cluster(10*time.Second, 30*time.Second)
	stopWatch := m.watchCycles(1500*time.Millisecond, func() string { return graphInEtcd(nodes[0].cli) })

	var commits, crossVictims, locals atomic.Int64
	var wg sync.WaitGroup
	for ni, n := range nodes {
		for w := range workers {
			rnd := rand.New(rand.NewPCG(uint64(ni), uint64(w)))
			wg.Go(func() {
				for i := range transfers {
					from := rnd.IntN(accounts)
					to := (from + 1 + rnd.IntN(accounts-1)) % accounts
					amount := 1 + rnd.IntN(50)
					for attempt := 0; ; attempt++ {
						name := fmt.Sprintf("%s.w%d.t%d.%d", n.name, w, i, attempt)
						order := [2]int{from, to}
						if rnd.IntN(2) == 0 {
							order = [2]int{to, from}
						}
						txn, err := n.l.BeginTx(recordlock.TxnOptions{Name: name})
						if !assert.NoError(t, err) {
							return
						}
						var hs [2]*recordlock.Handle
						for j, acct := range order {
							if hs[j], err = m.lock(txn, name, acct, opts); err != nil {
								break
							}
						}
						var de *recordlock.DeadlockError
						if errors.As(err, &de) {
							if de.Cycle[0].Node != "" {
								crossVictims.Add(1)
							} else {
								locals.Add(1)
							}
							txn.Rollback()
							m.ended(name)
							continue // retry at once
						}
						if !assert.NoError(t, err, "%s", name) {
							txn.Rollback()
							m.ended(name)
							return
						}
						err = b.transfer(t, name, from, to, amount, order, hs)
						if !assert.NoError(t, err, "%s: the fenced write", name) {
							txn.Rollback()
							m.ended(name)
							return
						}
						err = txn.Commit()
						m.ended(name)
						if !assert.NoError(t, err, "%s", name) {
							return
						}
						commits.Add(1)
						break
					}
				}
			})
		}
	}
	wg.Wait()
	maxCycle := stopWatch()

	assert.Equal(t, int64(len(nodes)*workers*transfers), commits.Load())
	assert.Equal(t, initial*accounts, b.sum(), "the total at the end")
	var coordDeadlocks uint64
	for _, n := range nodes {
		coordDeadlocks += n.coord.Stats().Deadlocks
	}
	assert.Equal(t, uint64(crossVictims.Load()), coordDeadlocks, "cross-node victims as the coordinators count them")
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range m.failures {
		t.Error(f)
	}
	assert.Zero(t, m.falseVictims, "false victims")
	assert.Zero(t, m.staleSteps, "steps of the errors' cycles that the model does not have")
	assert.Zero(t, m.longCycles, "cycles that lasted over 1.5 s")
	t.Logf("%d commits; %d deadlocks across nodes, %d within a node; victims on a cycle of holders %d, "+
		"only through a queue %d, false %d (with a stale step %d); longest Lock %v (%s, %s), Locks over 1.5 s %d; "+
		"longest cycle of the model %v, %d over 1.5 s",
		commits.Load(), crossVictims.Load(), locals.Load(), m.onCycle, m.queued, m.falseVictims, m.staleSteps,
		m.longest.Round(time.Millisecond), m.longestTxn, m.longestKey, m.slow, maxCycle.Round(time.Millisecond), m.longCycles)
	for _, s := range m.queuedSamples {
		t.Logf("a victim only through a queue: %s", s)
	}
}

func accountKey(acct int) string { return fmt.Sprintf("acct/%d", acct) }

// bank is the accounts the transfers move money between: the resource the locks guard. mu only
// keeps the race detector informed; what keeps the writers apart is the fences.
type bank struct {
	mu       sync.Mutex
	balance  []int
	version  []int    // writes to each account so far
	token    []uint64 // the fencing token of each account's last write
	occupied []atomic.Int32
	total    int
}

func newBank(accounts, initial int) *bank {
	b := &bank{balance: make([]int, accounts), version: make([]int, accounts), token: make([]uint64, accounts),
		occupied: make([]atomic.Int32, accounts), total: accounts * initial}
	for i := range b.balance {
		b.balance[i] = initial
	}
	return b
}

func (b *bank) sum() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := 0
	for _, v := range b.balance {
		s += v
	}
	return s
}

// transfer reads both accounts, then writes both inside the fences of hs, the handles of the
// accounts in order: it fails if another writer came between the read and the write, wrote at
// the same time, or wrote with a later token before.
func (b *bank) transfer(t *testing.T, name string, from, to, amount int, order [2]int, hs [2]*recordlock.Handle) error {
	b.mu.Lock()
	fromBal, toBal := b.balance[from], b.balance[to]
	read := [2]int{b.version[order[0]], b.version[order[1]]}
	b.mu.Unlock()
	return hs[0].Fence(func() error {
		return hs[1].Fence(func() error {
			for _, a := range order {
				if occ := b.occupied[a].Add(1); !assert.Equal(t, int32(1), occ, "%s: writers of %s at once", name, accountKey(a)) {
					return errors.New("two writers")
				}
			}
			defer func() {
				for _, a := range order {
					b.occupied[a].Add(-1)
				}
			}()
			b.mu.Lock()
			defer b.mu.Unlock()
			for j, a := range order {
				tok := hs[j].Token()
				assert.Equal(t, read[j], b.version[a], "%s: lost update of %s: written since it was read under the lock", name, accountKey(a))
				assert.GreaterOrEqual(t, tok, b.token[a], "%s: %s written with an older token", name, accountKey(a))
				b.token[a] = tok
				b.version[a]++
			}
			b.balance[from], b.balance[to] = fromBal-amount, toBal+amount
			s := 0
			for _, v := range b.balance {
				s += v
			}
			assert.Equal(t, b.total, s, "%s: the total after a commit", name)
			return nil
		})
	})
}

// waitModel is the test's own wait-for graph, kept by the workers, against which each
// ErrDeadlock is judged. It must have every edge the lock manager has when a victim is chosen,
// so it errs on the side of edges:
//
//   - a wait is recorded before Lock is called and cleared after it returns;
//   - a hold is recorded once Lock has returned and cleared once Commit or Rollback has
//     returned. A hold begins inside Lock, before it is recorded, but a Txn on a cycle is waiting
//     for its next account, and a worker records that wait only after the hold: so the holds of
//     every Txn on a cycle are recorded;
//   - two Txns whose Locks are for the same account wait for each other (a queue edge, both
//     ways): the one ahead may hold the node's own key of the account while it asks the cluster,
//     or have its recall in etcd first, and the model cannot tell which is ahead. A cycle of the
//     model has at least one hold edge: a queue alone is no deadlock.
//
// A victim's wait is still recorded when it is judged: under mu, before its Rollback, which is
// what would let the others of its cycle go on.
type waitModel struct {
	mu      sync.Mutex
	waiting map[string]int          // Txn → the account its Lock call is for
	holds   map[int]map[string]bool // account → the Txns holding it

	onCycle, queued, falseVictims, staleSteps, longCycles int
	queuedSamples, failures                               []string // the first few of each

	longest                time.Duration // of a Lock call
	longestTxn, longestKey string
	slow                   int // Lock calls longer than a second and a half
}

func newWaitModel() *waitModel {
	return &waitModel{waiting: map[string]int{}, holds: map[int]map[string]bool{}}
}

// lock is txn's Lock of acct, recorded in the model, and judged if it fails with ErrDeadlock.
func (m *waitModel) lock(txn *recordlock.Txn, name string, acct int, opts recordlock.Options) (*recordlock.Handle, error) {
	m.mu.Lock()
	m.waiting[name] = acct
	m.mu.Unlock()
	start := time.Now()
	h, err := txn.Lock(context.Background(), []byte(accountKey(acct)), opts)
	took := time.Since(start)
	m.mu.Lock()
	defer m.mu.Unlock()
	if took > m.longest {
		m.longest, m.longestTxn, m.longestKey = took, name, accountKey(acct)
	}
	if took > 1500*time.Millisecond {
		m.slow++
	}
	var de *recordlock.DeadlockError
	if errors.As(err, &de) {
		m.judgeLocked(name, de)
	}
	delete(m.waiting, name)
	if err == nil {
		if m.holds[acct] == nil {
			m.holds[acct] = map[string]bool{}
		}
		m.holds[acct][name] = true
	}
	return h, err
}

// ended clears the holds of a Txn that has committed or rolled back.
func (m *waitModel) ended(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, hs := range m.holds {
		delete(hs, name)
	}
}

// modelEdge is a step of the model: to the Txn waited for, and whether it holds the account.
type modelEdge struct {
	to   string
	hold bool
}

func (m *waitModel) edgesLocked(from string, queues bool) []modelEdge {
	acct, ok := m.waiting[from]
	if !ok {
		return nil
	}
	var out []modelEdge
	for h := range m.holds[acct] {
		if h != from {
			out = append(out, modelEdge{h, true})
		}
	}
	if queues {
		for o, a := range m.waiting {
			if a == acct && o != from {
				out = append(out, modelEdge{o, false})
			}
		}
	}
	return out
}

// cycleLocked returns a cycle of the model from start back to it, with at least one hold edge
// (hold edges only unless queues), as its Txns from start; nil if there is none.
func (m *waitModel) cycleLocked(start string, queues bool) []string {
	type state struct {
		at   string
		hold bool
	}
	parent := map[state]state{}
	first := state{start, false}
	seen := map[state]bool{first: true}
	queue := []state{first}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, e := range m.edgesLocked(s.at, queues) {
			next := state{e.to, s.hold || e.hold}
			if next.at == start {
				if !next.hold {
					continue
				}
				path := []string{start}
				for p := s; p != first; p = parent[p] {
					path = append(path, p.at)
				}
				slices.Reverse(path[1:])
				return path
			}
			if !seen[next] {
				seen[next] = true
				parent[next] = s
				queue = append(queue, next)
			}
		}
	}
	return nil
}

// judgeLocked checks a victim against the model: its error's cycle must be made of waits the
// model has, and a cycle must run through it.
func (m *waitModel) judgeLocked(victim string, de *recordlock.DeadlockError) {
	for _, w := range de.Cycle {
		if acct, ok := m.waiting[w.Txn]; !ok || accountKey(acct) != string(w.Key) {
			m.staleSteps++
			m.fail(fmt.Sprintf("%s's error names %s waiting for %s, which the model does not have (%v): %v",
				victim, w.Txn, w.Key, m.describeLocked(), de))
		}
	}
	switch {
	case m.cycleLocked(victim, false) != nil:
		m.onCycle++
	case m.cycleLocked(victim, true) != nil:
		m.queued++
		if len(m.queuedSamples) < 2 {
			m.queuedSamples = append(m.queuedSamples, fmt.Sprintf("%s: %v; model %s", victim, de, m.describeLocked()))
		}
	default:
		m.falseVictims++
		m.fail(fmt.Sprintf("false victim %s: no cycle through it in the model %s; its error: %v",
			victim, m.describeLocked(), de))
	}
}

// fail records a failure's message, the first ten only. Called with mu held.
func (m *waitModel) fail(msg string) {
	if len(m.failures) < 10 {
		m.failures = append(m.failures, msg)
	}
}

func (m *waitModel) describeLocked() string {
	var parts []string
	for txn, acct := range m.waiting {
		var holders []string
		for h := range m.holds[acct] {
			holders = append(holders, h)
		}
		slices.Sort(holders)
		parts = append(parts, fmt.Sprintf("%s waits for %s held by %v", txn, accountKey(acct), holders))
	}
	slices.Sort(parts)
	return "[" + strings.Join(parts, "; ") + "]"
}

// watchCycles samples the model's cycles of hold edges every few milliseconds and records a
// failure for each that lasts longer than limit. A cycle is named by its Txns, and it cannot end
// and form again, since a Txn leaves it only by ending: a cycle seen in two samples was there
// between them. The returned func stops it and returns the longest a cycle lasted.
func (m *waitModel) watchCycles(limit time.Duration, dump func() string) func() time.Duration {
	stop, done := make(chan struct{}), make(chan time.Duration)
	go func() {
		since := map[string]time.Time{}
		failed := map[string]bool{}
		var longest time.Duration
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				done <- longest
				return
			case <-tick.C:
			}
			now := time.Now()
			m.mu.Lock()
			cycles := map[string]string{}
			for txn := range m.waiting {
				c := m.cycleLocked(txn, false)
				if c == nil {
					continue
				}
				id := slices.Clone(c)
				slices.Sort(id)
				cycles[strings.Join(id, ",")] = m.describeLocked()
			}
			for id, desc := range cycles {
				first, ok := since[id]
				if !ok {
					since[id] = now
					continue
				}
				longest = max(longest, now.Sub(first))
				if now.Sub(first) > limit && !failed[id] {
					failed[id] = true
					m.longCycles++
					m.fail(fmt.Sprintf("the cycle of %s lasted over %v: %s; in etcd: %s", id, limit, desc, dump()))
				}
			}
			for id := range since {
				if _, ok := cycles[id]; !ok {
					delete(since, id)
				}
			}
			m.mu.Unlock()
		}
	}()
	return func() time.Duration {
		close(stop)
		return <-done
	}
}

// graphInEtcd lists the keys of the published graph and the recalls, for a failure's message.
func graphInEtcd(cli *clientv3.Client) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []string
	for _, p := range []string{"w/", "h/", "r/", "x/"} {
		resp, err := cli.Get(ctx, "/recordlock/"+p, clientv3.WithPrefix())
		if err != nil {
			return err.Error()
		}
		for _, kv := range resp.Kvs {
			out = append(out, fmt.Sprintf("%s@%d=%q", kv.Key, kv.ModRevision, kv.Value))
		}
	}
	return strings.Join(out, "\n")
}
