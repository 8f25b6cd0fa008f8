package etcdcoord

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/recordlock/recordlock"
)

// Deadlocks across nodes. Each node publishes, on its etcd lease, the part of the wait-for graph
// that other nodes cannot see:
//
//   - w/NODE/TXN: a Txn of the node waits for a record held, or asked for first, on another
//     node (a cross wait). Its ModRevision orders the cross waits of the cluster.
//   - h/ID/NODE: the node's Txns that hold record ID while a Txn of another node waits for it,
//     each with the paths of local waits that lead from it to a cross wait of the node.
//
// Every node follows both through its watch, so it sees the whole graph with no request of its
// own. A cycle is a path from a cross wait through holders and local waits back to it. Its victim
// is the cross wait in it that began last (the highest ModRevision), so every node that sees
// the cycle names the same one, and only the victim's node acts: it confirms the cycle in one
// Txn that compares the ModRevision of every key the cycle was read from, deleting its wait,
// and fails that Acquire with a *recordlock.DeadlockError. An edge that went away changed or
// deleted its key first, so the Txn fails and nobody is a victim.

// crossWait is a published cross wait, as the watch reports it.
type crossWait struct {
	Node    string `json:"node"`
	Txn     uint64 `json:"txn"`
	Name    string `json:"name"`
	Record  string `json:"record"` // the record's identity (recordID)
	CF      string `json:"cf"`
	Key     []byte `json:"key"`
	Shared  bool   `json:"shared"`
	Recall  string `json:"recall"` // the call's recall value: it is the asker when the recall is
	revised int64
	value   string // as published: a node's own wait is its current call's only while it is cw.value
}

// holding is what a node publishes of the Txns that hold a record another node waits for.
type holding struct {
	Node    string      `json:"node"`
	Record  string      `json:"record"`
	Holders []holderTxn `json:"holders"`
	revised int64
}

// holderTxn is one Txn holding the record, and the local paths from it to the node's cross
// waits: each path starts with the holder and ends with a Txn in a cross wait, every step
// waiting for the next in the node's table.
type holderTxn struct {
	Txn    uint64       `json:"txn"`
	Name   string       `json:"name"`
	Shared bool         `json:"shared"`
	Paths  [][]pathStep `json:"paths,omitempty"`
}

// pathStep is a Txn on a path and the record it waits for.
type pathStep struct {
	Txn  uint64 `json:"txn"`
	Name string `json:"name"`
	CF   string `json:"cf"`
	Key  []byte `json:"key"`
}

// waitKey is the key of a cross wait of Txn txn of this node.
func (c *Coordinator) waitKey(txn uint64) string {
	return c.cfg.prefix + "w/" + encode(c.node) + "/" + strconv.FormatUint(txn, 16)
}

// holdingKey is the key of this node's holders of record id.
func (c *Coordinator) holdingKey(id string) string {
	return c.cfg.prefix + "h/" + id + "/" + encode(c.node)
}

// waitValue is the published value of a's cross wait.
func (c *Coordinator) waitValue(a *ask, sess *session, req *recordlock.Request) string {
	c.recallValue(a, sess)
	b, _ := json.Marshal(crossWait{Node: c.node, Txn: req.Txn.ID, Name: req.Txn.Name, Record: a.k,
		CF: req.ColumnFamily, Key: req.Key, Shared: req.Shared, Recall: a.value})
	return string(b)
}

// applyGraphLocked follows a change of a key of the published graph (w/ or h/), reporting
// whether key was one. Called with c.mu held.
func (c *Coordinator) applyGraphLocked(typ mvccpb.Event_EventType, kv *mvccpb.KeyValue) bool {
	rest := strings.TrimPrefix(string(kv.Key), c.cfg.prefix)
	switch {
	case strings.HasPrefix(rest, "w/"):
		if typ == clientv3.EventTypeDelete {
			delete(c.graph.waits, string(kv.Key))
		} else {
			var w crossWait
			if json.Unmarshal(kv.Value, &w) == nil {
				w.revised, w.value = kv.ModRevision, string(kv.Value)
				c.graph.waits[string(kv.Key)] = &w
			}
		}
	case strings.HasPrefix(rest, "h/"):
		if typ == clientv3.EventTypeDelete {
			delete(c.graph.holdings, string(kv.Key))
		} else {
			var h holding
			if json.Unmarshal(kv.Value, &h) == nil {
				h.revised = kv.ModRevision
				c.graph.holdings[string(kv.Key)] = &h
			}
		}
	default:
		return false
	}
	c.graph.changed = true
	return true
}

// graphView is the published graph as this node's watch has applied it, guarded by c.mu.
type graphView struct {
	waits    map[string]*crossWait // by key
	holdings map[string]*holding   // by key
	changed  bool                  // since the last search
}

func newGraphView() graphView {
	return graphView{waits: map[string]*crossWait{}, holdings: map[string]*holding{}}
}

// vertex names a Txn across the cluster: its node and its ID there.
type vertex struct {
	node string
	txn  uint64
}

// edge is one step of the graph: from a Txn waiting for a record (cf, key) to a Txn it waits
// for, read from the keys named.
type edge struct {
	to       vertex
	name     string // the waiting Txn's name
	cf       string
	key      []byte
	readFrom []string // the published keys the step was read from
}

// graph is the published graph indexed for one search. Built under c.mu.
type graph struct {
	waits   map[vertex]string   // a Txn in a cross wait → the key of its wait
	view    *graphView          // what the keys hold
	holders map[string][]string // record → the keys of its holdings
	local   map[vertex][]edge   // steps of local paths
	askers  map[string]vertex   // record → the Txn whose recall of it is pending
}

// buildGraphLocked indexes the view for searches. Called with c.mu held.
func (c *Coordinator) buildGraphLocked() *graph {
	v := &c.graph
	g := &graph{waits: map[vertex]string{}, view: v, holders: map[string][]string{},
		local: map[vertex][]edge{}, askers: map[string]vertex{}}
	recalls := map[string]string{} // record → the value of its pending recall
	for id, r := range c.recalls {
		recalls[id] = r.value
	}
	for k, w := range v.waits {
		x := vertex{w.Node, w.Txn}
		g.waits[x] = k
		if recalls[w.Record] != "" && recalls[w.Record] == w.Recall {
			g.askers[w.Record] = x
		}
	}
	for _, k := range slices.Sorted(maps.Keys(v.holdings)) { // in order: every search alike
		h := v.holdings[k]
		g.holders[h.Record] = append(g.holders[h.Record], k)
		for _, e := range h.Holders {
			for _, p := range e.Paths {
				for i := 0; i+1 < len(p); i++ {
					from := vertex{h.Node, p[i].Txn}
					g.local[from] = append(g.local[from], edge{to: vertex{h.Node, p[i+1].Txn},
						name: p[i].Name, cf: p[i].CF, key: p[i].Key, readFrom: []string{k}})
				}
			}
		}
	}
	return g
}

// edges returns the steps out of x.
func (g *graph) edges(x vertex) []edge {
	out := g.local[x]
	k, ok := g.waits[x]
	if !ok {
		return out
	}
	w := g.view.waits[k]
	for _, hk := range g.holders[w.Record] {
		h := g.view.holdings[hk]
		if h.Node == w.Node {
			continue // a node's own holders are its table's business
		}
		for _, e := range h.Holders {
			if w.Shared && e.Shared {
				continue // readers do not wait for readers
			}
			out = append(out, edge{to: vertex{h.Node, e.Txn}, name: w.Name, cf: w.CF, key: w.Key, readFrom: []string{k, hk}})
		}
	}
	if a, ok := g.askers[w.Record]; ok && a != x {
		out = append(out, edge{to: a, name: w.Name, cf: w.CF, key: w.Key, readFrom: []string{k}})
	}
	return out
}

// cycleThrough returns the steps of a cycle from start back to start, or nil: a depth-first
// search over the Txns start reaches, each visited once.
func (g *graph) cycleThrough(start vertex) []edge {
	type frame struct {
		at    vertex
		edges []edge
		next  int
	}
	seen := map[vertex]bool{start: true}
	stack := []frame{{at: start, edges: g.edges(start)}}
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.next == len(top.edges) {
			stack = stack[:len(stack)-1]
			continue
		}
		e := top.edges[top.next]
		top.next++
		if e.to == start {
			path := make([]edge, 0, len(stack))
			for _, f := range stack {
				path = append(path, f.edges[f.next-1])
			}
			return path
		}
		if !seen[e.to] {
			seen[e.to] = true
			stack = append(stack, frame{at: e.to, edges: g.edges(e.to)})
		}
	}
	return nil
}

// victimOf returns the Txn of the cycle whose cross wait began last: the cycle's victim by the
// rule every node applies alike. from is the cycle's first Txn. A Txn that the one before it in
// the cycle waits for only on the record it waits for itself is passed over when another can
// be the victim: it holds that record's local key while it asks the cluster, so the one before
// it is queued behind it for the same holders, and failing it would break no cycle.
func (g *graph) victimOf(from vertex, cycle []edge) vertex {
	victim, latest := vertex{}, int64(-1)
	fallback, fallbackRev := vertex{}, int64(-1)
	into := cycle[len(cycle)-1] // the step into the Txn at hand
	at := from
	for _, e := range cycle {
		if k, ok := g.waits[at]; ok {
			w := g.view.waits[k]
			queued := into.cf == w.CF && string(into.key) == string(w.Key)
			switch {
			case !queued && w.revised > latest:
				victim, latest = at, w.revised
			case queued && w.revised > fallbackRev:
				fallback, fallbackRev = at, w.revised
			}
		}
		into, at = e, e.to
	}
	if latest < 0 {
		return fallback
	}
	return victim
}

// describe names the cycle from its first Txn, at, for a DeadlockError.
func (g *graph) describe(at vertex, cycle []edge) []recordlock.DeadlockWait {
	out := make([]recordlock.DeadlockWait, 0, len(cycle))
	for _, e := range cycle {
		out = append(out, recordlock.DeadlockWait{Txn: e.name, Node: at.node, ColumnFamily: e.cf, Key: e.key})
		at = e.to
	}
	return out
}

// readFrom lists the published keys the cycle was read from, each once, with the revision it
// was read at.
func (g *graph) readFrom(cycle []edge) map[string]int64 {
	keys := map[string]int64{}
	for _, e := range cycle {
		for _, k := range e.readFrom {
			if w, ok := g.view.waits[k]; ok {
				keys[k] = w.revised
			} else if h, ok := g.view.holdings[k]; ok {
				keys[k] = h.revised
			}
		}
	}
	return keys
}

// crossWaiter is an Acquire call of a Txn that may wait for another node. Its fields are
// guarded by c.mu; victim is closed once, when the call is a deadlock's victim.
type crossWaiter struct {
	txn    uint64
	key    string // its wait's key
	record string
	cf     string
	keyB   []byte
	name   string
	sent   bool     // its wait may be in etcd: delete it when the call ends
	value  string   // the value its wait is published with
	on     *session // the lease its wait was put on
	victim chan struct{}
	err    error // the DeadlockError, once victim is closed
}

// addCrossWaiterLocked registers a's call, of Txn req.Txn, as one that may wait for another
// node. Called with c.mu held.
func (c *Coordinator) addCrossWaiterLocked(a *ask, req *recordlock.Request) *crossWaiter {
	cw := &crossWaiter{txn: req.Txn.ID, key: c.waitKey(req.Txn.ID), record: a.k, cf: req.ColumnFamily,
		keyB: req.Key, name: req.Txn.Name, victim: make(chan struct{})}
	c.crossWaiters[cw.txn] = cw
	if req.Waits != nil {
		c.localWaits = req.Waits
	}
	return cw
}

// endCrossWait ends cw's registration as its call returns. Its published wait is deleted: at
// once when the call failed, so that no cycle through a wait that went away can be confirmed
// after the call returned; in the background when the call was granted.
func (c *Coordinator) endCrossWait(cw *crossWaiter, failed bool) {
	c.mu.Lock()
	if c.crossWaiters[cw.txn] == cw {
		delete(c.crossWaiters, cw.txn)
	}
	sent, value := cw.sent, cw.value
	cw.sent = false
	c.mu.Unlock()
	if !sent {
		return
	}
	del := func() {
		ctx, cancel := context.WithTimeout(leader(c.ctx), c.cfg.reqLimit)
		defer cancel()
		// The key is the Txn's, not the call's: by the time a deletion in the background lands,
		// the Txn's next Lock may have published its own wait there.
		_, _ = c.etcd.Txn(ctx, txnReq{ifs: []clientv3.Cmp{clientv3.Compare(clientv3.Value(cw.key), "=", value)},
			then: []op{deleteOp(cw.key)}})
	}
	if failed {
		del()
	} else {
		c.background(del)
	}
	c.signalDetector()
}

// victimErr is the DeadlockError of cw's call, whose victim channel is closed.
func (c *Coordinator) victimErr(cw *crossWaiter) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cw.err
}

// publishWait puts cw's wait in etcd, for a wait that no cold Txn published.
func (c *Coordinator) publishWait(ctx context.Context, cw *crossWaiter, value string, sess *session) {
	c.mu.Lock()
	if cw.sent && cw.on == sess { // a wait put on a lease that has ended went with it
		c.mu.Unlock()
		return
	}
	cw.sent, cw.value, cw.on = true, value, sess
	c.mu.Unlock()
	_, _ = c.etcd.Txn(leader(ctx), txnReq{then: []op{putOp(cw.key, value, sess.id)}})
	c.signalDetector()
}

// signalDetector wakes the detector.
func (c *Coordinator) signalDetector() {
	select {
	case c.detect <- struct{}{}:
	default:
	}
}
