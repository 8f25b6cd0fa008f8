package etcdcoord_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/linxGnu/grocksdb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/etcdcoord"
)

// A node: its RocksDB, a Locker, an etcd client and a coordinator over it. A cold key costs the
// node one etcd Txn for a delegation; a repeat lock of the key is served from that delegation
// with no request, and keeps its fencing token.
func ExampleNew() {
	endpoint, stopEtcd := exampleEtcd() // an embedded etcd; a deployment names its cluster's
	defer stopEtcd()

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	dir, err := os.MkdirTemp("", "etcdcoord-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	opts := grocksdb.NewDefaultOptions()
	opts.SetCreateIfMissing(true)
	db, err := grocksdb.OpenDb(opts, dir)
	opts.Destroy()
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	locker, err := recordlock.New(db)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	coord, err := etcdcoord.New(cli, "node-a", etcdcoord.WithTimestamp(locker.Timestamp))
	if err != nil {
		log.Fatal(err) // etcdcoord.ErrNameTaken: another live node has the name
	}
	defer coord.Close() // hands every delegation back at once
	locker.SetCoordinator(coord)

	ctx := context.Background()
	key := []byte("order/42")
	h, err := locker.Lock(ctx, key, recordlock.Options{Lease: 10 * time.Second})
	if err != nil {
		log.Fatal(err) // recordlock.ErrTimeout: another node held it; ErrClusterUnavailable: no etcd
	}
	fmt.Printf("%s locked with %v scope\n", key, h.Scope())
	first := h.Token()
	h.Release()

	h, err = locker.Lock(ctx, key, recordlock.Options{Lease: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("repeat lock, same fencing token:", h.Token() == first)
	h.Release()
	fmt.Println("delegations held:", coord.Stats().Delegations)
	// Output:
	// order/42 locked with cluster scope
	// repeat lock, same fencing token: true
	// delegations held: 1
}

// exampleEtcd starts a single-member etcd on free loopback ports, with its data in a temporary
// directory, and returns its client address and a func that stops it.
func exampleEtcd() (string, func()) {
	dir, err := os.MkdirTemp("", "etcdcoord-example-etcd-")
	if err != nil {
		log.Fatal(err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "example"
	cfg.Dir = dir
	client, peer := exampleURL(), exampleURL()
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatal(err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		log.Fatal("etcd did not become ready")
	}
	return client.Host, func() {
		e.Close()
		_ = os.RemoveAll(dir)
	}
}

func exampleURL() url.URL {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	return url.URL{Scheme: "http", Host: ln.Addr().String()}
}
