package node

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/linxGnu/grocksdb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/etcdcoord"
	"github.com/recordlock/recordlock/jepsen/resource"
)

// recordlockLock is a Locker with an etcdcoord.Coordinator on the node's own RocksDB.
type recordlockLock struct {
	db     *grocksdb.DB
	locker *recordlock.Locker
	coord  *etcdcoord.Coordinator
	opts   recordlock.Options
	// noToken leaves the token out of the requests to the resource.
	noToken bool
}

func openRecordlock(ctx context.Context, cli *clientv3.Client, cfg Config) (*recordlockLock, error) {
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	db, err := grocksdb.OpenDb(opts, cfg.DBDir)
	if err != nil {
		return nil, err
	}
	l := &recordlockLock{db: db, opts: recordlock.Options{Lease: cfg.Lease, Scope: recordlock.ScopeCluster},
		noToken: cfg.System == RecordlockNoToken}
	if l.locker, err = recordlock.New(db); err != nil {
		db.Close()
		return nil, err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	name := "node-" + string(rune('a'+cfg.Index))
	// A node restarted after SIGKILL finds its name live until its old etcd lease expires.
	for {
		l.coord, err = etcdcoord.New(cli, name, etcdcoord.WithTTL(cfg.TTL), etcdcoord.WithSkew(cfg.TTL/4),
			etcdcoord.WithTimestamp(l.locker.Timestamp), etcdcoord.WithLogger(logger))
		if err == nil || ctx.Err() != nil {
			break
		}
		logger.Info("coordinator not started yet", "err", err)
		time.Sleep(300 * time.Millisecond)
	}
	if err != nil {
		l.locker.Close()
		db.Close()
		return nil, err
	}
	l.locker.SetCoordinator(l.coord)
	return l, nil
}

func (l *recordlockLock) lock(ctx context.Context, _ int, key string) (held, error) {
	h, err := l.locker.Lock(ctx, []byte(key), l.opts)
	if err != nil {
		return nil, err
	}
	return recordlockHeld{h, l.noToken}, nil
}

func (l *recordlockLock) close() error {
	err := l.coord.Close()
	if errors.Is(err, recordlock.ErrClusterUnavailable) {
		err = nil // a node cut off from etcd cannot hand back: its keys lapse with its lease
	}
	err = errors.Join(err, l.locker.Close())
	l.db.Close()
	return err
}

type recordlockHeld struct {
	h       *recordlock.Handle
	noToken bool
}

func (h recordlockHeld) token() resource.Token {
	if h.noToken {
		return resource.Token{}
	}
	return resource.Token{Value: h.h.Token(), Fenced: true}
}
func (h recordlockHeld) fence(write func() error) error { return h.h.Fence(write) }
func (h recordlockHeld) release()                       { h.h.Release() }

// lockAll locks keys in a Txn with LockAll, shared or exclusive.
func (l *recordlockLock) lockAll(ctx context.Context, _ int, keys []string, shared bool) (heldAll, error) {
	t := l.locker.Begin()
	opts := l.opts
	opts.Shared = shared
	bs := make([][]byte, len(keys))
	for i, k := range keys {
		bs[i] = []byte(k)
	}
	hs, err := t.LockAll(ctx, opts, bs...)
	if err != nil {
		t.Rollback()
		return nil, err
	}
	return recordlockTxn{t: t, hs: hs, noToken: l.noToken}, nil
}

// lockEach locks keys exclusive in a Txn with one Lock each, in the order given.
func (l *recordlockLock) lockEach(ctx context.Context, _ int, keys []string) (heldAll, error) {
	t := l.locker.Begin()
	hs := make([]*recordlock.Handle, 0, len(keys))
	for _, k := range keys {
		h, err := t.Lock(ctx, []byte(k), l.opts)
		if err != nil {
			t.Rollback()
			return nil, err
		}
		hs = append(hs, h)
	}
	return recordlockTxn{t: t, hs: hs, noToken: l.noToken}, nil
}

// recordlockTxn is a Txn and the handles of the keys it locked, in the order it was given them.
type recordlockTxn struct {
	t       *recordlock.Txn
	hs      []*recordlock.Handle
	noToken bool
}

func (h recordlockTxn) tokens() []resource.Token {
	toks := make([]resource.Token, len(h.hs))
	for i, hh := range h.hs {
		toks[i] = recordlockHeld{hh, h.noToken}.token()
	}
	return toks
}

// fence runs f inside the Fence of every handle, so that it runs only while every lease is live
// and none of the keys passes to another holder, on this node or another, until it returns.
func (h recordlockTxn) fence(f func() error) error { return fenceAll(h.hs, f) }

// release ends the Txn, which releases its locks.
func (h recordlockTxn) release() { h.t.Rollback() }

func fenceAll(hs []*recordlock.Handle, f func() error) error {
	if len(hs) == 0 {
		return f()
	}
	return hs[0].Fence(func() error { return fenceAll(hs[1:], f) })
}
