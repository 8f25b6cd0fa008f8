package etcdcoord

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/recordlock/recordlock"
)

// simEtcd is an in-process etcd for the protocol simulation: revisions, compare-and-swap Txns,
// leases that expire on the simulated clock, and watch streams. Nothing happens on its own: a
// request waits until the scheduler answers it (or fails it, or applies it and loses the reply,
// or applies it and holds the reply back for a later step, so replies arrive out of order), and
// a watch event waits until the scheduler delivers it, alone or in a batch. The cluster can lose
// its leader: then a request or watch that requires one (clientv3.WithRequireLeader) fails at
// once, and one that does not waits, as on a member cut off from the quorum, until the leader
// is back.
type simEtcd struct {
	clock *recordlock.ManualClock

	mu        sync.Mutex
	rev       int64
	compacted int64
	kvs       map[string]*mvccpb.KeyValue
	history   []*clientv3.Event // every event after compacted, for watches from a past revision
	log       []*clientv3.Event // every event, never compacted: the oracle replays it (simHistory)
	leases    map[clientv3.LeaseID]*simLease
	nextLease clientv3.LeaseID
	calls     []*simCall // waiting to be applied
	late      []*simCall // applied, their replies held back
	streams   []*simStream
	// leaderless: the cluster has no leader. Nothing is applied, and no lease expires: a new
	// leader extends every lease by its TTL, as etcd's does.
	leaderless bool
	auto       bool  // answer and deliver everything at once: set up and tear down
	activity   int64 // bumped whenever a request arrives or a stream opens: for settling
}

type simLease struct {
	ttl     int64
	expires time.Duration
}

// simCall is a request waiting for the scheduler.
type simCall struct {
	node   string
	what   string
	detail string              // every other field of the request (callOrderLocked)
	leader bool                // sent with clientv3.WithRequireLeader
	apply  func() (any, error) // runs with simEtcd.mu held
	reply  chan simReply
	held   simReply // the reply of a late call
}

type simReply struct {
	resp any
	err  error
}

var errSimUnavailable = errors.New("sim: etcd unavailable")

func newSimEtcd(clock *recordlock.ManualClock) *simEtcd {
	return &simEtcd{clock: clock, kvs: map[string]*mvccpb.KeyValue{}, leases: map[clientv3.LeaseID]*simLease{}}
}

// client returns a node's etcdAPI on s.
func (s *simEtcd) client(node string) *simClient {
	return &simClient{s: s, node: node, closed: make(chan struct{})}
}

// call queues a request and waits for its reply or for ctx. A request whose ctx ended stays
// queued: the scheduler may still apply it, as etcd may apply a request whose reply never came.
func (s *simEtcd) call(ctx context.Context, node, what, detail string, apply func() (any, error)) (any, error) {
	c := &simCall{node: node, what: what, detail: detail, leader: requiresLeader(ctx), apply: apply, reply: make(chan simReply, 1)}
	s.mu.Lock()
	s.activity++
	if s.auto {
		resp, err := apply()
		s.flushAllLocked()
		s.mu.Unlock()
		return resp, err
	}
	if s.leaderless && c.leader {
		s.mu.Unlock()
		return nil, rpctypes.ErrNoLeader
	}
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	select {
	case r := <-c.reply:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// requiresLeader reports whether ctx carries clientv3.WithRequireLeader.
func requiresLeader(ctx context.Context) bool {
	md, ok := metadata.FromOutgoingContext(ctx)
	return ok && slices.Contains(md.Get(rpctypes.MetadataRequireLeaderKey), rpctypes.MetadataHasLeader)
}

// callOrderLocked returns the queued requests in the order the scheduler's choices index them:
// by node, by what they ask, by every other field, and only then as they arrived. The goroutines
// one step wakes send their requests in whatever order the runtime runs them, and a seed's
// choice must not depend on it. Called with s.mu held.
func (s *simEtcd) callOrderLocked() []*simCall {
	calls := slices.Clone(s.calls)
	slices.SortStableFunc(calls, func(a, b *simCall) int {
		return cmp.Or(strings.Compare(a.node, b.node), strings.Compare(a.what, b.what), strings.Compare(a.detail, b.detail))
	})
	return calls
}

// answer takes the i-th queued request of callOrderLocked off the queue: applied or not, and
// with its reply or an error, at once or, if late, held back until deliverLate.
func (s *simEtcd) answer(i int, applied, replied, late bool) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answerLocked(s.callOrderLocked()[i], applied, replied, late)
}

// queued returns the queued requests in callOrderLocked's order: none without a leader.
func (s *simEtcd) queued() []*simCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leaderless {
		return nil
	}
	return s.callOrderLocked()
}

// answerIfQueued answers c as asked if it is still queued, reporting whether it was.
func (s *simEtcd) answerIfQueued(c *simCall) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leaderless || !slices.Contains(s.calls, c) {
		return "", false
	}
	return s.answerLocked(c, true, true, false), true
}

// answerLocked answers queued request c as answer does. Called with s.mu held.
func (s *simEtcd) answerLocked(c *simCall, applied, replied, late bool) string {
	s.calls = slices.DeleteFunc(s.calls, func(x *simCall) bool { return x == c })
	var r simReply
	if applied {
		r.resp, r.err = c.apply()
	}
	if !replied {
		r = simReply{err: errSimUnavailable}
	}
	if late {
		c.held = r
		s.late = append(s.late, c)
	} else {
		c.reply <- r
	}
	return fmt.Sprintf("%s %s (revision %d)", c.node, c.what, s.rev)
}

// deliverLate delivers the held reply of late call i.
func (s *simEtcd) deliverLate(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.late[i]
	s.late = slices.Delete(s.late, i, i+1)
	c.reply <- c.held
	return c.node + " " + c.what
}

// pending is how many queued requests the scheduler can answer: none without a leader.
func (s *simEtcd) pending() (calls, late int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leaderless {
		return 0, len(s.late)
	}
	return len(s.calls), len(s.late)
}

// loseLeader takes the leader away: queued requests that require one fail unapplied, and so do
// the watches that require one; the rest wait. It returns those failures, each to be sent in
// turn: the scheduler lets what each wakes run before it sends the next.
func (s *simEtcd) loseLeader() []func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaderless = true
	var fails []func()
	for _, c := range s.callOrderLocked() {
		if c.leader {
			fails = append(fails, func() { c.reply <- simReply{err: rpctypes.ErrNoLeader} })
		}
	}
	s.calls = slices.DeleteFunc(s.calls, func(c *simCall) bool { return c.leader })
	for _, st := range s.streamOrderLocked() {
		if st.leader && !st.closed {
			fails = append(fails, func() {
				s.mu.Lock()
				defer s.mu.Unlock()
				if !st.closed {
					st.ch <- clientv3.WatchResponse{Header: *s.header(), Canceled: true}
					s.closeLocked(st)
				}
			})
		}
	}
	return fails
}

// regainLeader elects a leader, which extends every lease by its TTL.
func (s *simEtcd) regainLeader() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaderless = false
	now := s.clock.Mono()
	for _, l := range s.leases {
		l.expires = max(l.expires, now+time.Duration(l.ttl)*time.Second)
	}
}

// setAuto answers every queued request and delivers every event, and does so from now on.
func (s *simEtcd) setAuto() {
	s.mu.Lock()
	s.auto = true
	s.leaderless = false
	calls := s.calls
	s.calls = nil
	for _, c := range calls {
		resp, err := c.apply()
		c.reply <- simReply{resp, err}
	}
	for _, c := range s.late {
		c.reply <- c.held
	}
	s.late = nil
	for _, st := range s.streams {
		s.flushLocked(st)
	}
	s.mu.Unlock()
}

// header is the response header at the current revision.
func (s *simEtcd) header() *pb.ResponseHeader { return &pb.ResponseHeader{Revision: s.rev} }

// compare evaluates one condition as etcd does: a value compared on a missing key fails, and a
// condition over a range holds when it holds for every key in it (for a range with no key, as
// for one missing key).
func (s *simEtcd) compare(c clientv3.Cmp) bool {
	pc := pb.Compare(c)
	if len(pc.RangeEnd) == 0 {
		return s.compareKV(&pc, s.kvs[string(pc.Key)])
	}
	kvs := s.inRange(string(pc.Key), string(pc.RangeEnd))
	if len(kvs) == 0 {
		return s.compareKV(&pc, nil)
	}
	for _, kv := range kvs {
		if !s.compareKV(&pc, kv) {
			return false
		}
	}
	return true
}

// inRange returns the keys in [key, end), in key order.
func (s *simEtcd) inRange(key, end string) []*mvccpb.KeyValue {
	var kvs []*mvccpb.KeyValue
	for k, kv := range s.kvs {
		if k >= key && k < end {
			kvs = append(kvs, kv)
		}
	}
	slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Key, b.Key) })
	return kvs
}

// compareKV evaluates pc on kv, nil for a missing key.
func (s *simEtcd) compareKV(pc *pb.Compare, kv *mvccpb.KeyValue) bool {
	if kv == nil {
		if pc.Target == pb.Compare_VALUE {
			return false
		}
		kv = &mvccpb.KeyValue{}
	}
	var r int
	switch pc.Target {
	case pb.Compare_CREATE:
		r = cmpInt(kv.CreateRevision, pc.GetCreateRevision())
	case pb.Compare_MOD:
		r = cmpInt(kv.ModRevision, pc.GetModRevision())
	case pb.Compare_VERSION:
		r = cmpInt(kv.Version, pc.GetVersion())
	case pb.Compare_LEASE:
		r = cmpInt(kv.Lease, pc.GetLease())
	case pb.Compare_VALUE:
		r = bytes.Compare(kv.Value, pc.GetValue())
	}
	switch pc.Result {
	case pb.Compare_EQUAL:
		return r == 0
	case pb.Compare_NOT_EQUAL:
		return r != 0
	case pb.Compare_GREATER:
		return r > 0
	default:
		return r < 0
	}
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// txn runs a Txn: no branch may write a key twice, every put's lease must exist, and all its
// writes share one revision.
func (s *simEtcd) txn(t txnReq) (*clientv3.TxnResponse, error) {
	for _, ops := range [][]op{t.then, t.els} {
		if _, _, dup := duplicateKey(ops); dup {
			return nil, rpctypes.ErrDuplicateKey
		}
	}
	if err := s.checkLeases(t); err != nil {
		return nil, err
	}
	wrote := false
	resp := s.runTxn(t, &wrote)
	if wrote {
		s.rev++ // runTxn wrote at s.rev+1
	}
	resp.Header = s.header()
	return (*clientv3.TxnResponse)(resp), nil
}

// duplicateKey reports whether ops write a key twice, as etcd checks a Txn's branch before it
// runs it (checkIntervals in its server): a key put twice, or put and deleted, at this level or
// by a nested Txn, whose branches may put one key between them. It returns the keys ops put and
// delete, nested Txns' included.
func duplicateKey(ops []op) (puts, dels map[string]bool, dup bool) {
	puts, dels = map[string]bool{}, map[string]bool{}
	for _, o := range ops {
		if o.kind == opDelete {
			dels[o.key] = true
		}
	}
	for _, o := range ops {
		if o.kind != opTxn {
			continue
		}
		putsThen, delsThen, dup := duplicateKey(o.txn.then)
		if dup {
			return nil, nil, true
		}
		putsElse, delsElse, dup := duplicateKey(o.txn.els)
		if dup {
			return nil, nil, true
		}
		for k := range putsThen {
			if puts[k] || dels[k] {
				return nil, nil, true
			}
			puts[k] = true
		}
		for k := range putsElse {
			if puts[k] && !putsThen[k] || dels[k] {
				return nil, nil, true
			}
			puts[k] = true
		}
		maps.Copy(dels, delsThen)
		maps.Copy(dels, delsElse)
	}
	for _, o := range ops {
		if o.kind != opPut {
			continue
		}
		if puts[o.key] || dels[o.key] {
			return nil, nil, true
		}
		puts[o.key] = true
	}
	return puts, dels, false
}

func (s *simEtcd) checkLeases(t txnReq) error { return s.checkPathLeases(t, s.path(t)) }

// checkPathLeases checks the leases of the puts on the path taken only, as etcd does.
func (s *simEtcd) checkPathLeases(t txnReq, p *simPath) error {
	ops := t.els
	if p.ok {
		ops = t.then
	}
	for i, o := range ops {
		switch {
		case o.kind == opPut && o.lease != 0 && s.leases[o.lease] == nil:
			return rpctypes.ErrLeaseNotFound
		case o.kind == opTxn:
			if err := s.checkPathLeases(*o.txn, p.nested[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *simEtcd) holds(ifs []clientv3.Cmp) bool {
	for _, c := range ifs {
		if !s.compare(c) {
			return false
		}
	}
	return true
}

// path evaluates the conditions of t and of every Txn nested in the branch taken, all before
// anything is written, as etcd does: a nested Txn's conditions see the state before the Txn.
type simPath struct {
	ok     bool
	nested map[int]*simPath // by the index of the op in the branch taken
}

func (s *simEtcd) path(t txnReq) *simPath {
	p := &simPath{ok: s.holds(t.ifs), nested: map[int]*simPath{}}
	ops := t.els
	if p.ok {
		ops = t.then
	}
	for i, o := range ops {
		if o.kind == opTxn {
			p.nested[i] = s.path(*o.txn)
		}
	}
	return p
}

func (s *simEtcd) runTxn(t txnReq, wrote *bool) *pb.TxnResponse {
	return s.runPath(t, s.path(t), wrote)
}

func (s *simEtcd) runPath(t txnReq, p *simPath, wrote *bool) *pb.TxnResponse {
	ok := p.ok
	ops := t.els
	if ok {
		ops = t.then
	}
	resp := &pb.TxnResponse{Succeeded: ok}
	at := s.rev + 1
	for i, o := range ops {
		var r pb.ResponseOp
		switch o.kind {
		case opGet:
			rr := &pb.RangeResponse{}
			if o.end != "" {
				for _, kv := range s.inRange(o.key, o.end) {
					rr.Kvs = append(rr.Kvs, copyKV(kv))
				}
				rr.Count = int64(len(rr.Kvs))
			} else if kv := s.kvs[o.key]; kv != nil {
				rr.Kvs, rr.Count = []*mvccpb.KeyValue{copyKV(kv)}, 1
			}
			r.Response = &pb.ResponseOp_ResponseRange{ResponseRange: rr}
		case opPut:
			*wrote = true
			s.putAt(o.key, o.value, o.lease, at)
			r.Response = &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{}}
		case opDelete:
			n := int64(0)
			if s.kvs[o.key] != nil {
				*wrote = true
				s.deleteAt(o.key, at)
				n = 1
			}
			r.Response = &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: &pb.DeleteRangeResponse{Deleted: n}}
		case opTxn:
			r.Response = &pb.ResponseOp_ResponseTxn{ResponseTxn: s.runPath(*o.txn, p.nested[i], wrote)}
		}
		resp.Responses = append(resp.Responses, &r)
	}
	return resp
}

func copyKV(kv *mvccpb.KeyValue) *mvccpb.KeyValue {
	c := *kv
	return &c
}

func (s *simEtcd) putAt(key, value string, lease clientv3.LeaseID, rev int64) {
	kv := s.kvs[key]
	if kv == nil {
		kv = &mvccpb.KeyValue{Key: []byte(key), CreateRevision: rev}
		s.kvs[key] = kv
	}
	kv.Value, kv.ModRevision, kv.Lease = []byte(value), rev, int64(lease)
	kv.Version++
	s.emit(&clientv3.Event{Type: mvccpb.PUT, Kv: copyKV(kv)})
}

func (s *simEtcd) deleteAt(key string, rev int64) {
	delete(s.kvs, key)
	s.emit(&clientv3.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}})
}

// emit queues an event on every open stream it falls under. In auto mode, whatever wrote it
// flushes the streams once the whole revision is queued (flushAllLocked): etcd never splits a
// revision's events between two responses.
func (s *simEtcd) emit(ev *clientv3.Event) {
	s.history = append(s.history, ev)
	s.log = append(s.log, ev)
	for _, st := range s.streams {
		if !st.closed && strings.HasPrefix(string(ev.Kv.Key), st.prefix) {
			st.queue = append(st.queue, ev)
		}
	}
}

// flushAllLocked delivers every stream's queued events, in auto mode. Called with s.mu held.
func (s *simEtcd) flushAllLocked() {
	if s.auto {
		for _, st := range s.streams {
			s.flushLocked(st)
		}
	}
}

// revokeLocked deletes a lease and, at one revision, every key on it.
func (s *simEtcd) revokeLocked(id clientv3.LeaseID) {
	delete(s.leases, id)
	var keys []string
	for k, kv := range s.kvs {
		if kv.Lease == int64(id) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	s.rev++
	for _, k := range slices.Sorted(slices.Values(keys)) {
		s.deleteAt(k, s.rev)
	}
}

// expire lets go of every lease whose TTL has run out on the clock.
func (s *simEtcd) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leaderless {
		return
	}
	now := s.clock.Mono()
	for _, id := range slices.Sorted(maps.Keys(s.leases)) { // in order: each revocation is a revision
		if s.leases[id].expires <= now {
			s.revokeLocked(id)
		}
	}
	s.flushAllLocked()
}

// since returns the events of the log from the i-th on, and etcd's current revision.
func (s *simEtcd) since(i int) ([]*clientv3.Event, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log[i:len(s.log):len(s.log)], s.rev
}

// revision is etcd's current revision.
func (s *simEtcd) revision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}
