package etcdcoord

import (
	"context"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// countedEtcd is an etcdAPI that counts the requests sent through it, for Stats.Requests: every
// KV request (Txn, GetPrefix) and every lease grant, refresh and revoke, counted when sent,
// whether or not it succeeds. The watch is one long stream, not a request: WatchPrefix,
// Disconnected and Closed pass through uncounted.
type countedEtcd struct {
	etcdAPI
	n atomic.Uint64
}

func (e *countedEtcd) Txn(ctx context.Context, t txnReq) (*clientv3.TxnResponse, error) {
	e.n.Add(1)
	return e.etcdAPI.Txn(ctx, t)
}

func (e *countedEtcd) GetPrefix(ctx context.Context, prefix string) (*clientv3.GetResponse, error) {
	e.n.Add(1)
	return e.etcdAPI.GetPrefix(ctx, prefix)
}

func (e *countedEtcd) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	e.n.Add(1)
	return e.etcdAPI.Grant(ctx, ttl)
}

func (e *countedEtcd) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	e.n.Add(1)
	return e.etcdAPI.KeepAliveOnce(ctx, id)
}

func (e *countedEtcd) Revoke(ctx context.Context, id clientv3.LeaseID) error {
	e.n.Add(1)
	return e.etcdAPI.Revoke(ctx, id)
}
