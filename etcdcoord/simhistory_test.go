package etcdcoord

import (
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// simHistory replays the simulated etcd's changes, one revision at a time, for the oracle: when
// each writer's recall was pending, when each node's lease held each record (by an exclusive or
// a shared key, across its changes of mode), and how often the seeds made the moves of the
// protocol that involve more than one node's delegations.
type simHistory struct {
	next     int                         // how many events of the etcd log it has replayed
	kvs      map[string]*mvccpb.KeyValue // etcd's keys as of the last revision replayed
	writers  []*simWriterRecall          // every writer's recall, in the order written
	pending  map[string]*simWriterRecall // record identity → its writer's recall pending now
	holdings map[simHolder][]*simHolding // every time a lease held a record, in order
	grants   map[simGrant]bool           // every delegation key put
	holding  map[simHolder]*simHolding   // the holdings under way
	nodes    map[int64]string            // the node registered on each lease (n/NAME)
	counts   simCounts
}

// simHolder is a lease's hold of a record: its exclusive key or its shared key.
type simHolder struct {
	id    string
	lease int64
}

// simHolding is a time a lease held a record without a break: from the revision that put its
// first key of the record until the one that deleted its last (0 while it holds it).
type simHolding struct{ from, to int64 }

// simGrant is a delegation key of a record put on a lease at a revision: a conversion puts two
// at one revision, its holder's and the reader's.
type simGrant struct {
	id    string
	lease int64
	rev   int64
}

// simWriterRecall is a writer's recall (an r/ key whose value asks for "x"): pending from the
// revision that wrote it until the one that deleted it (0 while it is pending).
type simWriterRecall struct {
	id       string // the record's identity
	node     string // the asker
	lease    int64
	from, to int64
	readers  int // shared delegations of other nodes when it was written
}

// pendingAt reports whether r was pending at revision rev.
func (r *simWriterRecall) pendingAt(rev int64) bool {
	return r.from <= rev && (r.to == 0 || rev < r.to)
}

// heldFrom returns the revision from which lease had held the record without a break, as of
// revision rev, if revision tok put a delegation key of the record on it; 0 otherwise.
func (h *simHistory) heldFrom(id string, lease, tok, rev int64) int64 {
	if !h.grants[simGrant{id, lease, tok}] {
		return 0
	}
	for _, hd := range h.holdings[simHolder{id, lease}] {
		if hd.from <= rev && (hd.to == 0 || rev < hd.to) {
			return hd.from
		}
	}
	return 0
}

// simCounts are the moves the seeds made that involve several nodes' delegations of a record.
type simCounts struct {
	crossShared     int // shared admissions made while another node had a live shared holder of the record
	downConversions int // exclusive delegations turned shared for a reader on another node
	upgrades        int // shared delegations turned exclusive by their node's writer
	writerRecalls   int // writers' recalls written while two or more other nodes held the record shared
	writerGrants    int // those writers granted the record
	txnsLocked      int // Txns that locked every record of their plan
	victims         int // Txns' Locks failed with ErrDeadlock by the coordinator: a cycle across nodes
	localVictims    int // Txns' Locks failed with ErrDeadlock by their node's table
	cyclesJudged    int // cycles the oracle saw last through a quiet tick of the clock (simdeadlock_test.go)
}

func (c simCounts) String() string {
	return fmt.Sprintf("%d cross-node shared holds, %d down-conversions, %d upgrades, %d writer recalls of several readers (%d granted), "+
		"%d Txns that locked their plan, %d deadlock victims across nodes (%d within a node), %d cycles judged",
		c.crossShared, c.downConversions, c.upgrades, c.writerRecalls, c.writerGrants,
		c.txnsLocked, c.victims, c.localVictims, c.cyclesJudged)
}

func (c *simCounts) add(o simCounts) {
	c.crossShared += o.crossShared
	c.downConversions += o.downConversions
	c.upgrades += o.upgrades
	c.writerRecalls += o.writerRecalls
	c.writerGrants += o.writerGrants
	c.txnsLocked += o.txnsLocked
	c.victims += o.victims
	c.localVictims += o.localVictims
	c.cyclesJudged += o.cyclesJudged
}

// simKeyInfo is a delegation or recall key the history understands.
type simKeyInfo struct {
	kind  byte // 'x', 's' or 'r'
	id    string
	lease int64 // of an s/ key, from its name
}

// parseKey reads a key under the prefix; ok is false for names and anything else.
func (w *simWorld) parseKey(key []byte) (simKeyInfo, bool) {
	kind, id, ok := w.nodes[0].c.parse(key)
	if !ok {
		return simKeyInfo{}, false
	}
	info := simKeyInfo{kind: kind, id: id}
	if kind == 's' {
		k := string(key)
		lease, err := strconv.ParseUint(k[strings.LastIndexByte(k, '/')+1:], 16, 64)
		if err != nil {
			return simKeyInfo{}, false
		}
		info.lease = int64(lease)
	}
	return info, true
}

// simRecallOf reads a recall value: the asker's node and lease, and whether it asks for a
// writer.
func simRecallOf(value []byte) (node string, lease int64, writer, ok bool) {
	n, l, shared, ok := recallLease(string(value))
	return n, int64(l), !shared, ok
}

// replayLocked replays the changes etcd made since the last call, checking at each revision
// that no lease begins to hold a record while another node's writer waits for it. Called with
// w.mu held.
func (w *simWorld) replayLocked() {
	h := &w.history
	if h.kvs == nil {
		h.kvs = map[string]*mvccpb.KeyValue{}
		h.pending = map[string]*simWriterRecall{}
		h.holdings = map[simHolder][]*simHolding{}
		h.grants = map[simGrant]bool{}
		h.holding = map[simHolder]*simHolding{}
		h.nodes = map[int64]string{}
	}
	evs, _ := w.etcd.since(h.next)
	h.next += len(evs)
	for len(evs) > 0 {
		n := 1
		for n < len(evs) && evs[n].Kv.ModRevision == evs[0].Kv.ModRevision {
			n++
		}
		w.replayRevisionLocked(evs[:n])
		evs = evs[n:]
	}
}

// simChange is one change of a delegation or recall key at a revision.
type simChange struct {
	key  string
	info simKeyInfo
	put  bool
	kv   *mvccpb.KeyValue // the new key, or for a delete the key as it was (nil if unknown)
}

// lease is the lease of the delegation the change is to: an s/ key's from its name.
func (ch simChange) lease() int64 {
	if ch.info.kind == 's' {
		return ch.info.lease
	}
	if ch.kv != nil {
		return ch.kv.Lease
	}
	return 0
}

// replayRevisionLocked replays the changes of one revision, all made by one Txn or one lease's
// end. Called with w.mu held.
func (w *simWorld) replayRevisionLocked(evs []*clientv3.Event) {
	h := &w.history
	rev := evs[0].Kv.ModRevision
	var changes []simChange
	for _, ev := range evs {
		if name, ok := strings.CutPrefix(simName(string(ev.Kv.Key)), "n/"); ok && ev.Type == mvccpb.PUT {
			h.nodes[ev.Kv.Lease] = name
		}
		info, ok := w.parseKey(ev.Kv.Key)
		if !ok {
			continue
		}
		ch := simChange{key: string(ev.Kv.Key), info: info, put: ev.Type == mvccpb.PUT, kv: ev.Kv}
		if !ch.put {
			ch.kv = h.kvs[ch.key]
		}
		changes = append(changes, ch)
	}
	// What the revision did to each record's delegations.
	type moves struct{ xDeleted, xPut, sDeleted, rDeleted *mvccpb.KeyValue }
	byRecord := map[string]*moves{}
	touched := map[simHolder]bool{}
	var sPuts []simChange
	for _, ch := range changes {
		m := byRecord[ch.info.id]
		if m == nil {
			m = &moves{}
			byRecord[ch.info.id] = m
		}
		if ch.info.kind != 'r' {
			touched[simHolder{ch.info.id, ch.lease()}] = true
		}
		switch {
		case ch.info.kind == 'x' && ch.put:
			m.xPut = ch.kv
		case ch.info.kind == 'x' && ch.kv != nil:
			m.xDeleted = ch.kv
		case ch.info.kind == 's' && ch.put:
			sPuts = append(sPuts, ch)
		case ch.info.kind == 's' && ch.kv != nil:
			m.sDeleted = ch.kv
		case ch.info.kind == 'r' && !ch.put && ch.kv != nil:
			m.rDeleted = ch.kv
		}
	}
	for _, ch := range sPuts {
		if x := byRecord[ch.info.id].xDeleted; x != nil && x.Lease != ch.info.lease {
			h.counts.downConversions++ // an exclusive key turned into its holder's shared key and a reader's
		}
	}
	for id, m := range byRecord {
		if m.sDeleted != nil && m.xPut != nil && m.sDeleted.Lease == m.xPut.Lease {
			h.counts.upgrades++
		}
		if r := h.pending[id]; r != nil && m.xPut != nil && m.rDeleted != nil && h.nodes[m.xPut.Lease] == r.node && r.readers >= 2 {
			h.counts.writerGrants++
		}
	}
	for _, ch := range changes {
		if ch.put {
			h.kvs[ch.key] = ch.kv
			if ch.info.kind != 'r' {
				h.grants[simGrant{ch.info.id, ch.lease(), rev}] = true
			}
		} else {
			delete(h.kvs, ch.key)
		}
	}
	// Which leases began or ended a hold of a record. The rule: while a writer's recall is pending,
	// no other node begins to hold the record, so none admits a reader that asked after the
	// writer; a holder may change its own mode (a down-conversion does not wait its turn).
	for hd := range touched {
		xkey := w.nodes[0].c.xkey(hd.id)
		skey := w.nodes[0].c.skey(hd.id, clientv3.LeaseID(hd.lease))
		holds := (h.kvs[xkey] != nil && h.kvs[xkey].Lease == hd.lease) || h.kvs[skey] != nil
		cur := h.holding[hd]
		switch {
		case holds && cur == nil:
			if r := h.pending[hd.id]; r != nil && r.node != h.nodes[hd.lease] {
				w.fail("revision %d (%s) gave %s, on lease %x, a delegation of %s while %s's writer's recall of revision %d, on lease %x, was pending "+
					"(a waiting writer is not passed by a reader that asked after it: while a writer's recall is pending, no other node creates a delegation of the record)",
					rev, w.describeRevision(evs), h.nodes[hd.lease], hd.lease, describeID(hd.id), r.node, r.from, r.lease)
			}
			cur = &simHolding{from: rev}
			h.holding[hd] = cur
			h.holdings[hd] = append(h.holdings[hd], cur)
		case !holds && cur != nil:
			cur.to = rev
			delete(h.holding, hd)
		}
	}
	// Follow the recalls the revision wrote or deleted.
	for _, ch := range changes {
		if ch.info.kind != 'r' {
			continue
		}
		if r := h.pending[ch.info.id]; r != nil {
			r.to = rev
			delete(h.pending, ch.info.id)
		}
		if !ch.put {
			continue
		}
		node, lease, writer, ok := simRecallOf(ch.kv.Value)
		if !ok || !writer {
			continue
		}
		r := &simWriterRecall{id: ch.info.id, node: node, lease: lease, from: rev}
		from, to := w.nodes[0].c.shared(ch.info.id)
		for k, kv := range h.kvs {
			if k >= from && k < to && h.nodes[kv.Lease] != node {
				r.readers++
			}
		}
		if r.readers >= 2 {
			h.counts.writerRecalls++
		}
		h.pending[ch.info.id] = r
		h.writers = append(h.writers, r)
	}
}

// describeRevision names the changes of one revision, for a failure's message.
func (w *simWorld) describeRevision(evs []*clientv3.Event) string {
	var parts []string
	for _, ev := range evs {
		verb := "put"
		if ev.Type == mvccpb.DELETE {
			verb = "del"
		}
		parts = append(parts, verb+" "+simName(string(ev.Kv.Key)))
	}
	return strings.Join(parts, " ")
}
