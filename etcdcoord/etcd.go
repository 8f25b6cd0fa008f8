package etcdcoord

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"
)

// etcdAPI is every call the coordinator makes to etcd. clientEtcd, over a clientv3 client, is
// its one production implementation; the tests also run the protocol against a simulated etcd
// through it. Conditions and responses are etcd's own types; operations are op, since a
// clientv3.Op does not show the lease a put is attached to.
type etcdAPI interface {
	Txn(ctx context.Context, t txnReq) (*clientv3.TxnResponse, error)
	GetPrefix(ctx context.Context, prefix string) (*clientv3.GetResponse, error)
	Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error)
	KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error)
	Revoke(ctx context.Context, id clientv3.LeaseID) error
	// WatchPrefix watches every key under prefix from revision rev, reporting when the watch
	// is created.
	WatchPrefix(ctx context.Context, prefix string, rev int64) clientv3.WatchChan
	// Disconnected ends the watch ctx belongs to, with errDisconnected, when the connection to
	// etcd stops being ready; it returns when ctx ends.
	Disconnected(ctx context.Context, cancel context.CancelCauseFunc)
	// Closed is done once the client is closed: nothing sent after that reaches etcd.
	Closed() <-chan struct{}
}

// txnReq is a Txn: if every condition holds, then runs, otherwise els.
type txnReq struct {
	ifs       []clientv3.Cmp
	then, els []op
}

// op is one operation of a Txn: a put (on lease, if not 0), a delete or a get of key (a get of
// every key in [key, end) when end is set), or a nested Txn.
type op struct {
	kind  opKind
	key   string
	end   string
	value string
	lease clientv3.LeaseID
	txn   *txnReq
}

type opKind uint8

const (
	opGet opKind = iota
	opPut
	opDelete
	opTxn
)

func getOp(key string) op           { return op{kind: opGet, key: key} }
func getRangeOp(key, end string) op { return op{kind: opGet, key: key, end: end} }
func putOp(key, value string, lease clientv3.LeaseID) op {
	return op{kind: opPut, key: key, value: value, lease: lease}
}
func deleteOp(key string) op { return op{kind: opDelete, key: key} }
func txnOp(ifs []clientv3.Cmp, then, els []op) op {
	return op{kind: opTxn, txn: &txnReq{ifs: ifs, then: then, els: els}}
}

// clientEtcd is etcdAPI over a clientv3 client.
type clientEtcd struct{ cli *clientv3.Client }

func (e clientEtcd) Txn(ctx context.Context, t txnReq) (*clientv3.TxnResponse, error) {
	return e.cli.Txn(ctx).If(t.ifs...).Then(clientOps(t.then)...).Else(clientOps(t.els)...).Commit()
}

func clientOps(ops []op) []clientv3.Op {
	out := make([]clientv3.Op, len(ops))
	for i, o := range ops {
		switch o.kind {
		case opGet:
			if o.end != "" {
				out[i] = clientv3.OpGet(o.key, clientv3.WithRange(o.end))
			} else {
				out[i] = clientv3.OpGet(o.key)
			}
		case opPut:
			var opts []clientv3.OpOption
			if o.lease != 0 {
				opts = append(opts, clientv3.WithLease(o.lease))
			}
			out[i] = clientv3.OpPut(o.key, o.value, opts...)
		case opDelete:
			out[i] = clientv3.OpDelete(o.key)
		case opTxn:
			out[i] = clientv3.OpTxn(o.txn.ifs, clientOps(o.txn.then), clientOps(o.txn.els))
		}
	}
	return out
}

func (e clientEtcd) GetPrefix(ctx context.Context, prefix string) (*clientv3.GetResponse, error) {
	return e.cli.Get(ctx, prefix, clientv3.WithPrefix())
}

func (e clientEtcd) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	return e.cli.Grant(ctx, ttl)
}

func (e clientEtcd) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	return e.cli.KeepAliveOnce(ctx, id)
}

func (e clientEtcd) Revoke(ctx context.Context, id clientv3.LeaseID) error {
	_, err := e.cli.Revoke(ctx, id)
	return err
}

func (e clientEtcd) WatchPrefix(ctx context.Context, prefix string, rev int64) clientv3.WatchChan {
	return e.cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithCreatedNotify())
}

func (e clientEtcd) Closed() <-chan struct{} { return e.cli.Ctx().Done() }

// Disconnected ends the watch when the client's connection to etcd stops being ready: the
// client would retry the watch in place without a word, and the node would go on admitting
// from delegations while it cannot see recalls or deletions.
func (e clientEtcd) Disconnected(ctx context.Context, cancel context.CancelCauseFunc) {
	conn := e.cli.ActiveConnection()
	wasReady := false
	for {
		state := conn.GetState()
		switch {
		case state == connectivity.Ready:
			wasReady = true
		case wasReady || state == connectivity.TransientFailure || state == connectivity.Shutdown:
			cancel(errDisconnected)
			return
		}
		if !conn.WaitForStateChange(ctx, state) {
			return
		}
	}
}
