package etcdcoord

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/recordlock/recordlock"
)

// simEtcd is an in-process etcd for the protocol simulation: revisions, compare-and-swap Txns,
// leases that expire on the simulated clock, and watch streams. Nothing happens on its own: a
// request waits until the scheduler answers it (or fails it, or applies it and loses the
// reply), and a watch event waits until the scheduler delivers it, alone or in a batch.
type simEtcd struct {
	clock *recordlock.ManualClock

	mu        sync.Mutex
	rev       int64
	compacted int64
	kvs       map[string]*mvccpb.KeyValue
	history   []*clientv3.Event // every event after compacted, for watches from a past revision
	leases    map[clientv3.LeaseID]*simLease
	nextLease clientv3.LeaseID
	calls     []*simCall
	streams   []*simStream
	auto      bool  // answer and deliver everything at once: set up and tear down
	activity  int64 // bumped whenever a request arrives or a stream opens: for settling
}

type simLease struct {
	ttl     int64
	expires time.Duration
}

// simCall is a request waiting for the scheduler.
type simCall struct {
	node  string
	what  string
	apply func() (any, error) // runs with simEtcd.mu held
	reply chan simReply
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
func (s *simEtcd) call(ctx context.Context, node, what string, apply func() (any, error)) (any, error) {
	c := &simCall{node: node, what: what, apply: apply, reply: make(chan simReply, 1)}
	s.mu.Lock()
	s.activity++
	if s.auto {
		resp, err := apply()
		s.mu.Unlock()
		return resp, err
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

// answer takes call i off the queue: applied or not, and with its reply or an error.
func (s *simEtcd) answer(i int, applied, replied bool) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls[i]
	s.calls = append(s.calls[:i], s.calls[i+1:]...)
	var r simReply
	if applied {
		r.resp, r.err = c.apply()
	}
	if !replied {
		r = simReply{err: errSimUnavailable}
	}
	c.reply <- r
	return c.node + " " + c.what
}

func (s *simEtcd) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// setAuto answers every queued request and delivers every event, and does so from now on.
func (s *simEtcd) setAuto() {
	s.mu.Lock()
	s.auto = true
	calls := s.calls
	s.calls = nil
	for _, c := range calls {
		resp, err := c.apply()
		c.reply <- simReply{resp, err}
	}
	for _, st := range s.streams {
		s.flushLocked(st)
	}
	s.mu.Unlock()
}

// header is the response header at the current revision.
func (s *simEtcd) header() *pb.ResponseHeader { return &pb.ResponseHeader{Revision: s.rev} }

// compare evaluates one condition as etcd does: a value compared on a missing key fails.
func (s *simEtcd) compare(c clientv3.Cmp) bool {
	pc := pb.Compare(c)
	kv := s.kvs[string(pc.Key)]
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

// txn runs a Txn: every put's lease must exist, and all its writes share one revision.
func (s *simEtcd) txn(t txnReq) (*clientv3.TxnResponse, error) {
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

func (s *simEtcd) checkLeases(t txnReq) error {
	ops := t.els
	if s.holds(t.ifs) {
		ops = t.then
	}
	for _, o := range ops {
		switch {
		case o.kind == opPut && o.lease != 0 && s.leases[o.lease] == nil:
			return rpctypes.ErrLeaseNotFound
		case o.kind == opTxn:
			if err := s.checkLeases(*o.txn); err != nil {
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

func (s *simEtcd) runTxn(t txnReq, wrote *bool) *pb.TxnResponse {
	ok := s.holds(t.ifs)
	ops := t.els
	if ok {
		ops = t.then
	}
	resp := &pb.TxnResponse{Succeeded: ok}
	at := s.rev + 1
	for _, o := range ops {
		var r pb.ResponseOp
		switch o.kind {
		case opGet:
			rr := &pb.RangeResponse{}
			if kv := s.kvs[o.key]; kv != nil {
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
			r.Response = &pb.ResponseOp_ResponseTxn{ResponseTxn: s.runTxn(*o.txn, wrote)}
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

// emit queues an event on every open stream it falls under.
func (s *simEtcd) emit(ev *clientv3.Event) {
	s.history = append(s.history, ev)
	for _, st := range s.streams {
		if !st.closed && strings.HasPrefix(string(ev.Kv.Key), st.prefix) {
			st.queue = append(st.queue, ev)
			if s.auto {
				s.flushLocked(st)
			}
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
	now := s.clock.Mono()
	for id, l := range s.leases {
		if l.expires <= now {
			s.revokeLocked(id)
		}
	}
}

// delegation returns the ModRevision and lease of key's delegation in etcd, 0s if none.
func (s *simEtcd) delegation(key string) (rev, lease int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if kv := s.kvs[key]; kv != nil {
		return kv.ModRevision, kv.Lease
	}
	return 0, 0
}
