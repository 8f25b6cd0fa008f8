package etcdcoord

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// simClient is one node's etcdAPI on a simEtcd.
type simClient struct {
	s      *simEtcd
	node   string
	closed chan struct{}
}

func (c *simClient) Txn(ctx context.Context, t txnReq) (*clientv3.TxnResponse, error) {
	resp, err := c.s.call(ctx, c.node, "txn{"+describe(t.then)+"}", detail(t), func() (any, error) { return c.s.txn(t) })
	if err != nil {
		return nil, err
	}
	return resp.(*clientv3.TxnResponse), nil
}

func (c *simClient) GetPrefix(ctx context.Context, prefix string) (*clientv3.GetResponse, error) {
	resp, err := c.s.call(ctx, c.node, "get", prefix, func() (any, error) {
		r := &clientv3.GetResponse{Header: c.s.header()}
		for _, k := range slices.Sorted(maps.Keys(c.s.kvs)) {
			if strings.HasPrefix(k, prefix) {
				r.Kvs = append(r.Kvs, copyKV(c.s.kvs[k]))
			}
		}
		r.Count = int64(len(r.Kvs))
		return r, nil
	})
	if err != nil {
		return nil, err
	}
	return resp.(*clientv3.GetResponse), nil
}

func (c *simClient) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	resp, err := c.s.call(ctx, c.node, "grant", strconv.FormatInt(ttl, 10), func() (any, error) {
		c.s.nextLease++
		id := c.s.nextLease
		c.s.leases[id] = &simLease{ttl: ttl, expires: c.s.clock.Mono() + time.Duration(ttl)*time.Second}
		return &clientv3.LeaseGrantResponse{ResponseHeader: c.s.header(), ID: id, TTL: ttl}, nil
	})
	if err != nil {
		return nil, err
	}
	return resp.(*clientv3.LeaseGrantResponse), nil
}

func (c *simClient) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	resp, err := c.s.call(ctx, c.node, "keepalive", strconv.FormatInt(int64(id), 16), func() (any, error) {
		l := c.s.leases[id]
		if l == nil {
			return nil, rpctypes.ErrLeaseNotFound
		}
		l.expires = c.s.clock.Mono() + time.Duration(l.ttl)*time.Second
		return &clientv3.LeaseKeepAliveResponse{ResponseHeader: c.s.header(), ID: id, TTL: l.ttl}, nil
	})
	if err != nil {
		return nil, err
	}
	return resp.(*clientv3.LeaseKeepAliveResponse), nil
}

func (c *simClient) Revoke(ctx context.Context, id clientv3.LeaseID) error {
	_, err := c.s.call(ctx, c.node, "revoke", strconv.FormatInt(int64(id), 16), func() (any, error) {
		if c.s.leases[id] == nil {
			return nil, rpctypes.ErrLeaseNotFound
		}
		c.s.revokeLocked(id)
		return nil, nil
	})
	return err
}

func (c *simClient) WatchPrefix(ctx context.Context, prefix string, rev int64) clientv3.WatchChan {
	s := c.s
	st := &simStream{node: c.node, prefix: prefix, leader: requiresLeader(ctx), ch: make(chan clientv3.WatchResponse, 1024)}
	s.mu.Lock()
	s.activity++
	if s.leaderless && st.leader && !s.auto {
		st.created = true
		st.ch <- clientv3.WatchResponse{Header: *s.header(), Canceled: true}
		s.closeLocked(st)
		s.mu.Unlock()
		return st.ch
	}
	if rev <= s.compacted {
		st.created = true
		st.ch <- clientv3.WatchResponse{Header: *s.header(), CompactRevision: s.compacted}
		s.closeLocked(st)
		s.mu.Unlock()
		return st.ch
	}
	for _, ev := range s.history {
		if ev.Kv.ModRevision >= rev && strings.HasPrefix(string(ev.Kv.Key), prefix) {
			st.queue = append(st.queue, ev)
		}
	}
	s.streams = append(s.streams, st)
	if s.auto {
		s.flushLocked(st)
	}
	s.mu.Unlock()
	go func() {
		<-ctx.Done()
		s.mu.Lock()
		s.closeLocked(st)
		s.mu.Unlock()
	}()
	return st.ch
}

func (c *simClient) Disconnected(ctx context.Context, _ context.CancelCauseFunc) { <-ctx.Done() }

func (c *simClient) Closed() <-chan struct{} { return c.closed }

// describe names the writes a Txn makes if its conditions hold, for the steps' log and for the
// schedules to pick a request by: "put x/default/k0 del r/default/k0", nested Txns in braces.
func describe(ops []op) string {
	var parts []string
	for _, o := range ops {
		switch o.kind {
		case opPut:
			parts = append(parts, "put "+simName(o.key))
		case opDelete:
			if strings.HasPrefix(o.key, DefaultPrefix+"h/") {
				// Every hand-back deletes the node's holders of the record too: left out, so that
				// the hand-backs read (and the schedules find them) as the protocol's moves.
				continue
			}
			parts = append(parts, "del "+simName(o.key))
		case opTxn:
			parts = append(parts, "txn{"+describe(o.txn.then)+"}")
		}
	}
	return strings.Join(parts, " ")
}

// detail renders every field of a Txn, nested ones too, for callOrderLocked.
func detail(t txnReq) string {
	var b strings.Builder
	detailTo(&b, t)
	return b.String()
}

func detailTo(b *strings.Builder, t txnReq) {
	b.WriteString("if")
	for _, c := range t.ifs {
		pc := pb.Compare(c)
		b.WriteString(" " + pc.String())
	}
	for i, ops := range [][]op{t.then, t.els} {
		b.WriteString([]string{" then", " else"}[i])
		for _, o := range ops {
			fmt.Fprintf(b, " %d %q %q %q %x", o.kind, o.key, o.end, o.value, o.lease)
			if o.txn != nil {
				b.WriteString(" {")
				detailTo(b, *o.txn)
				b.WriteString("}")
			}
		}
	}
}

// simName is a coordinator key as "x/default/k0" (exclusive delegation), "s/default/k0/2"
// (shared delegation on lease 2) or "r/default/k0" (recall), "n/n0" for a name, and for
// deadlock detection "w/n0/3" (a cross wait of n0's Txn 3) or "h/default/k0/n1" (n1's holders).
func simName(key string) string {
	rest := strings.TrimPrefix(key, DefaultPrefix)
	if len(rest) < 2 {
		return key
	}
	switch {
	case strings.HasPrefix(rest, "w/"):
		if node, txn, ok := strings.Cut(rest[2:], "/"); ok {
			if raw, err := base64.RawURLEncoding.DecodeString(node); err == nil {
				return "w/" + string(raw) + "/" + txn
			}
		}
		return key
	case strings.HasPrefix(rest, "h/"):
		i := strings.LastIndexByte(rest, '/')
		raw, err := base64.RawURLEncoding.DecodeString(rest[i+1:])
		if cf, k, ok := decodeID(rest[2:i]); ok && err == nil {
			return "h/" + cf + "/" + k + "/" + string(raw)
		}
		return key
	}
	id, lease := rest[2:], ""
	if rest[0] == 's' {
		if i := strings.LastIndexByte(id, '/'); i >= 0 {
			id, lease = id[:i], "/"+strings.TrimLeft(id[i+1:], "0")
		}
	}
	if cf, k, ok := decodeID(id); ok {
		return rest[:2] + cf + "/" + k + lease
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest[2:])
	if err != nil {
		return key
	}
	return rest[:2] + string(raw)
}
