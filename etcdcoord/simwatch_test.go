package etcdcoord

import (
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// simStream is one watch.
type simStream struct {
	node    string
	prefix  string
	leader  bool // opened with clientv3.WithRequireLeader
	heldFor int  // how many more steps the scheduler holds its events back
	ch      chan clientv3.WatchResponse
	created bool // the created notice was delivered
	queue   []*clientv3.Event
	closed  bool
}

// deliver sends a stream's created notice, or up to n of its queued events in one response,
// and the rest of the last one's revision: etcd never splits a revision's events between two
// responses.
func (s *simEtcd) deliver(st *simStream, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.closed || st.heldFor > 0 {
		return
	}
	if !st.created {
		st.created = true
		st.ch <- clientv3.WatchResponse{Header: *s.header(), Created: true}
		return
	}
	n = min(n, len(st.queue))
	if n == 0 {
		return
	}
	for n < len(st.queue) && st.queue[n].Kv.ModRevision == st.queue[n-1].Kv.ModRevision {
		n++
	}
	evs := st.queue[:n:n]
	st.queue = st.queue[n:]
	st.ch <- clientv3.WatchResponse{Header: *s.header(), Events: evs}
}

func (s *simEtcd) flushLocked(st *simStream) {
	if st.closed {
		return
	}
	if !st.created {
		st.created = true
		st.ch <- clientv3.WatchResponse{Header: *s.header(), Created: true}
	}
	if len(st.queue) > 0 {
		st.ch <- clientv3.WatchResponse{Header: *s.header(), Events: st.queue}
		st.queue = nil
	}
}

// breakStream ends a watch as etcd cancelling it would; compact also compacts etcd at its
// current revision, so the node's next watch from an older revision is refused.
func (s *simEtcd) breakStream(st *simStream, compact bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.closed {
		return
	}
	resp := clientv3.WatchResponse{Header: *s.header(), Canceled: true}
	if compact {
		s.compacted = s.rev
		s.history = nil
		resp = clientv3.WatchResponse{Header: *s.header(), CompactRevision: s.rev}
	}
	st.ch <- resp
	s.closeLocked(st)
}

func (s *simEtcd) closeLocked(st *simStream) {
	if !st.closed {
		st.closed = true
		close(st.ch)
	}
}

// openStreams are the streams not yet closed, in streamOrderLocked's order. Each step counts
// down the holds.
func (s *simEtcd) openStreams() []*simStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*simStream
	for _, st := range s.streamOrderLocked() {
		if !st.closed {
			out = append(out, st)
		}
	}
	return out
}

// streamOrderLocked returns the streams by node, each node's as it opened them: nodes whose
// watches restart in one step open them in whatever order the runtime runs them. Called with
// s.mu held.
func (s *simEtcd) streamOrderLocked() []*simStream {
	sts := slices.Clone(s.streams)
	slices.SortStableFunc(sts, func(a, b *simStream) int { return strings.Compare(a.node, b.node) })
	return sts
}

// hold keeps a stream's events back for the next steps steps.
func (s *simEtcd) hold(st *simStream, steps int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st.heldFor = steps
}

// tick counts one step off every hold.
func (s *simEtcd) tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.streams {
		st.heldFor = max(st.heldFor-1, 0)
	}
}
