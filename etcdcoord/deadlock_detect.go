package etcdcoord

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/recordlock/recordlock"
)

// detectPoll is how often the detector looks at the local waits of this node's Txns that hold a
// record another node waits for: the table does not say when a local wait begins or ends.
const detectPoll = 10 * time.Millisecond

// maxPathTxns bounds the Txns a search of the local waits from one holder visits.
const maxPathTxns = 256

// detector publishes this node's holders of the records other nodes wait for and fails the
// waits of this node that are the victims of cycles, until the coordinator closes. It wakes
// when the watch applies a change of the published graph, when a wait of this node begins or
// ends, and every detectPoll while this node has holders or waits in the graph.
func (c *Coordinator) detector() {
	defer c.wg.Done()
	for {
		busy := c.publishHoldings()
		c.failVictims()
		var poll recordlock.Timer
		if busy {
			poll = c.cfg.clock.AfterFunc(detectPoll, c.signalDetector)
		}
		select {
		case <-c.ctx.Done():
		case <-c.detect:
		}
		if poll != nil {
			poll.Stop()
		}
		if c.ctx.Err() != nil {
			return
		}
	}
}

// exposedHolder is a Txn of this node holding a record another node's Txn waits for.
type exposedHolder struct {
	record string
	txn    uint64
	shared bool
}

// publishHoldings brings this node's h/ keys up to date: one per record of which a Txn of this
// node holds an admission while a Txn of another node waits for it, with the paths of local
// waits from each holder to a cross wait of this node. It reports whether any holder or cross
// wait of this node is in the graph, so that the detector keeps looking.
func (c *Coordinator) publishHoldings() bool {
	c.mu.Lock()
	if c.closed || c.sess == nil || !c.watching {
		c.mu.Unlock()
		return false
	}
	wanted := map[string]bool{} // records another node's Txn waits for
	for _, w := range c.graph.waits {
		if w.Node != c.node {
			wanted[w.Record] = true
		}
	}
	var exposed []exposedHolder
	for id, d := range c.delegs {
		if !wanted[id] {
			continue
		}
		for _, a := range d.kept {
			if !a.released && a.txn.ID != 0 {
				exposed = append(exposed, exposedHolder{record: id, txn: a.txn.ID, shared: a.shared})
			}
		}
	}
	// In order, so that one set of holders is always published as one value.
	slices.SortFunc(exposed, func(a, b exposedHolder) int {
		return cmp.Or(strings.Compare(a.record, b.record), cmp.Compare(a.txn, b.txn))
	})
	cross := map[uint64]*crossWaiter{}
	for id, cw := range c.crossWaiters {
		if cw.sent {
			cross[id] = cw
		}
	}
	waits, sess := c.localWaits, c.sess
	if sess != c.publishedOn { // what was published lived on a lease that is gone
		c.published, c.publishedOn = map[string]string{}, sess
	}
	names := map[uint64]string{}
	for _, d := range c.delegs {
		for _, a := range d.kept {
			names[a.txn.ID] = a.txn.Name
		}
	}
	c.mu.Unlock()

	next := map[string]string{} // key → value
	byRecord := map[string]*holding{}
	for _, e := range exposed {
		h := byRecord[e.record]
		if h == nil {
			h = &holding{Node: c.node, Record: e.record}
			byRecord[e.record] = h
		}
		h.Holders = append(h.Holders, holderTxn{Txn: e.txn, Name: names[e.txn], Shared: e.shared,
			Paths: c.pathsFrom(e.txn, names[e.txn], waits, cross)})
	}
	for id, h := range byRecord {
		b, _ := json.Marshal(h)
		next[c.holdingKey(id)] = string(b)
	}
	var ops []op
	for _, k := range slices.Sorted(maps.Keys(next)) {
		if v := next[k]; c.published[k] != v {
			ops = append(ops, putOp(k, v, sess.id))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.published)) {
		if _, ok := next[k]; !ok {
			ops = append(ops, deleteOp(k))
		}
	}
	if len(ops) > 0 {
		ctx, cancel := context.WithTimeout(leader(c.ctx), c.cfg.reqLimit)
		_, err := c.etcd.Txn(ctx, txnReq{then: ops})
		cancel()
		if err == nil {
			c.published = next
		}
	}
	c.exposed.Store(len(exposed) > 0)
	return len(exposed) > 0 || len(cross) > 0
}

// pathsFrom returns the paths of local waits from Txn txn to the cross waits of this node: a
// breadth-first search over the node's table, each Txn visited once.
func (c *Coordinator) pathsFrom(txn uint64, name string, waits recordlock.LocalWaits, cross map[uint64]*crossWaiter) [][]pathStep {
	type node struct {
		step   pathStep
		parent int
	}
	var nodes []node
	seen := map[uint64]bool{txn: true}
	var paths [][]pathStep
	queue := []int{}
	add := func(t uint64, name string, parent int) {
		nodes = append(nodes, node{step: pathStep{Txn: t, Name: name}, parent: parent})
		queue = append(queue, len(nodes)-1)
	}
	add(txn, name, -1)
	for len(queue) > 0 && len(nodes) <= maxPathTxns {
		i := queue[0]
		queue = queue[1:]
		t := nodes[i].step.Txn
		if cw, ok := cross[t]; ok { // the path ends at a cross wait
			nodes[i].step.CF, nodes[i].step.Key = cw.cf, cw.keyB
			var p []pathStep
			for j := i; j >= 0; j = nodes[j].parent {
				p = append(p, nodes[j].step)
			}
			slices.Reverse(p)
			paths = append(paths, p)
			continue
		}
		if waits == nil {
			continue
		}
		w, ok := waits.WaitOf(t)
		if !ok {
			continue
		}
		nodes[i].step.CF, nodes[i].step.Key = w.ColumnFamily, w.Key
		for _, f := range w.For {
			if !seen[f.ID] {
				seen[f.ID] = true
				add(f.ID, f.Name, i)
			}
		}
	}
	return paths
}

// failVictims looks for a cycle through each cross wait of this node and fails the wait that
// is its victim, once a Txn has confirmed that every key the cycle was read from is unchanged.
func (c *Coordinator) failVictims() {
	type found struct {
		cw       *crossWaiter
		cycle    []recordlock.DeadlockWait
		readFrom map[string]int64
	}
	var victims []found
	c.mu.Lock()
	if len(c.crossWaiters) == 0 {
		c.mu.Unlock()
		return
	}
	g := c.buildGraphLocked()
	for _, txn := range slices.Sorted(maps.Keys(c.crossWaiters)) { // in order: every search alike
		cw := c.crossWaiters[txn]
		self := vertex{c.node, cw.txn}
		// The Txn's key may still hold the wait of its previous call, granted and not yet
		// deleted, while this call's put is in flight: a cycle through that one is no cycle of
		// this call's.
		if k, ok := g.waits[self]; !ok || !cw.sent || c.graph.waits[k].value != cw.value {
			continue
		}
		cycle := g.cycleThrough(self)
		if cycle == nil || g.victimOf(self, cycle) != self {
			continue
		}
		victims = append(victims, found{cw: cw, cycle: g.describe(self, cycle), readFrom: g.readFrom(cycle)})
	}
	c.mu.Unlock()
	for _, v := range victims {
		ifs := make([]clientv3.Cmp, 0, len(v.readFrom))
		for k, rev := range v.readFrom {
			ifs = append(ifs, clientv3.Compare(clientv3.ModRevision(k), "=", rev))
		}
		ctx, cancel := context.WithTimeout(leader(c.ctx), c.cfg.reqLimit)
		resp, err := c.etcd.Txn(ctx, txnReq{ifs: ifs, then: []op{deleteOp(v.cw.key)}})
		cancel()
		if err != nil || !resp.Succeeded {
			continue // an edge went away, or etcd did not answer: look again on the next change
		}
		c.mu.Lock()
		if v.cw.err == nil {
			v.cw.sent = false
			v.cw.err = &recordlock.DeadlockError{Cycle: v.cycle}
			close(v.cw.victim)
			c.stats.Deadlocks++
		}
		c.mu.Unlock()
	}
}
