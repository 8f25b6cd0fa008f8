package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startEtcd starts a single-member etcd on free loopback ports, with its data in a temporary
// directory, and returns its client address and a func that stops it and removes the data.
func startEtcd() (string, func(), error) {
	dir, err := os.MkdirTemp("", "recordlock-cluster-etcd-")
	if err != nil {
		return "", nil, err
	}
	client, err := loopbackURL()
	if err != nil {
		return "", nil, err
	}
	peer, err := loopbackURL()
	if err != nil {
		return "", nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "example"
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// etcd logs through zap, at info level by default, and reports its listeners closing at
	// shutdown ("mux: server closed") as errors: a demo has no use for either.
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	stop := func() {
		e.Close()
		_ = os.RemoveAll(dir)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, fmt.Errorf("embedded etcd not ready after 30s")
	}
	return client.Host, stop, nil
}

// loopbackURL returns an http URL on a free loopback port.
func loopbackURL() (url.URL, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	defer ln.Close()
	return url.URL{Scheme: "http", Host: ln.Addr().String()}, nil
}
