// Command jepsen tests recordlock's cluster locks under real faults, as Jepsen tests etcd's: three
// etcd server processes, three node processes that lock hot keys with recordlock and etcdcoord
// and write a shared resource process with their fencing tokens, and a nemesis that pauses,
// kills and partitions them on a schedule drawn from a seed. porcupine checks the history.
// Beside them the nodes' bank clients move money between accounts at the resource under
// exclusive locks and read every account under shared locks, and every read must add up to the
// same total. The same workload and schedule then run with etcd's concurrency.Mutex (which has
// no shared mode, so its readers lock exclusive) and no token, which must show a violation of
// the registers, or the harness has not shown it can see one.
//
//	jepsen -etcd ../bin/etcd -time 60s -seed 7   # from the repository: make jepsen
//
// It writes the report (-report) and prints one line:
//
//	jepsen: recordlock N ops, F faults, V violations, bank R reads, T transfers, B violations, D deadlocks broken; etcd-mutex ...
//
// and exits 0 only when recordlock's run is linearizable with no lost update and no bank
// violation, the control shows a violation of the registers, each system completed 1,000
// operations and 200 bank reads and 200 transfers, and every kind of fault fired in each. A
// third of recordlock's transfers lock their two accounts one at a time, source first, so that
// they deadlock with each other and with the rest, within a node and across nodes; D counts the
// locks that failed with ErrDeadlock, each retried at once. The node and resource roles are this
// program too (jepsen node, jepsen resource).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/recordlock/recordlock/jepsen/node"
	"github.com/recordlock/recordlock/jepsen/resource"
)

func main() {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var code int
	switch role := firstArg(); role {
	case "node":
		code = runNode(ctx, os.Args[2:])
	case "resource":
		code = runResource(ctx, os.Args[2:])
	default:
		code = runTest(ctx, os.Args[1:])
	}
	stop()
	os.Exit(code)
}

func firstArg() string {
	if len(os.Args) > 1 {
		return os.Args[1]
	}
	return ""
}

func runNode(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("node", flag.ExitOnError)
	var cfg node.Config
	var endpoints, keys, accounts string
	fs.StringVar(&cfg.System, "system", node.Recordlock, "recordlock or etcd-mutex")
	fs.IntVar(&cfg.Index, "index", 0, "the node's index")
	fs.IntVar(&cfg.Incarnation, "incarnation", 0, "how many times the node was started before")
	fs.StringVar(&endpoints, "endpoints", "", "etcd endpoints, comma-separated")
	fs.StringVar(&cfg.DBDir, "db", "", "the node's RocksDB directory")
	fs.StringVar(&cfg.Resource, "resource", "", "host:port of the resource")
	fs.StringVar(&cfg.History, "history", "", "the history log")
	fs.IntVar(&cfg.Clients, "clients", 3, "clients")
	fs.StringVar(&keys, "keys", "", "hot keys, comma-separated")
	fs.DurationVar(&cfg.TTL, "ttl", 3*time.Second, "etcd lease TTL")
	fs.DurationVar(&cfg.Lease, "lease", time.Second, "lock lease")
	fs.DurationVar(&cfg.Hold, "hold", 120*time.Millisecond, "the longest wait between read and write")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the clients' choices")
	fs.StringVar(&cfg.BankHistory, "bank-history", "", "the bank log")
	fs.IntVar(&cfg.BankClients, "bank-clients", 0, "bank clients")
	fs.StringVar(&accounts, "accounts", "", "the bank's accounts, comma-separated, in key order")
	_ = fs.Parse(args)
	cfg.Endpoints, cfg.Keys = strings.Split(endpoints, ","), strings.Split(keys, ",")
	if accounts != "" {
		cfg.Accounts = strings.Split(accounts, ",")
	}
	if err := node.Run(ctx, cfg); err != nil {
		log.Printf("node %d: %v", cfg.Index, err)
		return 1
	}
	return 0
}

func runResource(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("resource", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "where to listen")
	_ = fs.Parse(args)
	srv := &http.Server{Addr: *addr, Handler: resource.Handler(resource.NewStore()), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "resource:", err)
		return 1
	}
	return 0
}
