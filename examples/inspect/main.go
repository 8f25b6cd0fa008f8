// Command inspect shows what Locker.Locks and Locker.Stats report while workers contend for a few
// records of a RocksDB in a temp dir: every 200ms it prints the held keys, with who waits for them
// and how much lease they have left, and a line of figures. It runs for about two seconds.
//
// With -http ADDR (for example -http :8080) it instead serves the debug page of package
// httpdebug at http://ADDR/debug/recordlock/, showing the same figures with the waits and the
// wait-for graph, while the workers contend until the program is interrupted.
//
// Some workers lock through a Txn and commit a counter, some read a counter in a Txn under a
// shared lock, some lock with Locker.Lock and Hold, and one stalls past its lease now and then, so
// the lapse and fence counters move too. There is one row per holder: a key that readers share
// appears once for each, with mode shared. The owner column is the name of the Txn that holds a
// key (TxnOptions.Name), "-" for a lock outside one.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/httpdebug"
)

const (
	runFor = 2 * time.Second
	every  = 200 * time.Millisecond
)

var keys = []string{"account:1", "account:2", "account:3"}

func main() {
	addr := flag.String("http", "", "serve the debug page at this address (for example :8080) until interrupted, instead of printing for two seconds")
	flag.Parse()
	db, closeDB, err := openTempDB("recordlock-inspect-")
	if err != nil {
		log.Fatal(err)
	}
	defer closeDB()
	locker, err := recordlock.New(db)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for id := range 3 {
		wg.Go(func() { txnWorker(ctx, locker, id) })
	}
	for id := 3; id < 5; id++ {
		wg.Go(func() { holdWorker(ctx, locker, id) })
	}
	for id := 5; id < 8; id++ {
		wg.Go(func() { readWorker(ctx, locker, id) })
	}
	wg.Go(func() { staller(ctx, locker, db) })

	if *addr != "" {
		err := serve(*addr, locker)
		stop()
		wg.Wait()
		if err != nil {
			log.Fatal(err)
		}
		return
	}

	tick := time.NewTicker(every)
	start := time.Now()
	for range tick.C {
		elapsed := time.Since(start)
		fmt.Printf("== after %v\n", elapsed.Round(10*time.Millisecond))
		printLocks(locker)
		printStats(locker.Stats())
		if elapsed >= runFor {
			break
		}
	}
	tick.Stop()
	stop()
	wg.Wait()
	fmt.Println("== workers stopped")
	printStats(locker.Stats())
}

// serve serves the debug page of locker's database at addr until the program is interrupted.
func serve(addr string, locker *recordlock.Locker) error {
	mux := http.NewServeMux()
	mux.Handle("/debug/recordlock/", httpdebug.Handler(map[string]*recordlock.Locker{"inspect": locker}))
	mux.Handle("/{$}", http.RedirectHandler("/debug/recordlock/", http.StatusFound))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	fmt.Printf("serving http://%s/debug/recordlock/ until interrupted\n", ln.Addr())
	interrupted, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-interrupted.Done():
	}
	shutdown, cancelShutdown := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShutdown()
	return srv.Shutdown(shutdown)
}

// printLocks prints one row per holder, sorted by key, then owner.
func printLocks(l *recordlock.Locker) {
	var rows []recordlock.LockInfo
	for info := range l.Locks() {
		rows = append(rows, info)
	}
	slices.SortFunc(rows, func(a, b recordlock.LockInfo) int {
		return cmp.Or(cmp.Compare(string(a.Key), string(b.Key)), cmp.Compare(a.Owner, b.Owner))
	})
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tMODE\tOWNER\tHOLD\tSCOPE\tCF\tWAITERS\tREMAINING")
	for _, r := range rows {
		owner := cmp.Or(r.Owner, "-")
		fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%v\t%d\t%d\t%v\n", r.Key, mode(r.Shared), owner, r.Hold, r.Scope, r.ColumnFamilyID, r.Waiters, r.Remaining.Round(time.Millisecond))
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "(nothing held)")
	}
	w.Flush()
}

// mode names a lock's mode as the MODE column shows it.
func mode(shared bool) string {
	if shared {
		return "shared"
	}
	return "exclusive"
}

func printStats(s recordlock.Stats) {
	fmt.Printf("held=%d waiting=%d acquired=%d contended=%d wait=%v timeouts=%d canceled=%d lapsed=%d fenced=%d\n",
		s.Held, s.Waiting, s.Acquired, s.Contended, s.WaitTime.Round(time.Millisecond), s.Timeouts, s.Canceled, s.Lapsed, s.Fenced)
}

// txnWorker increments a random counter in a Txn, holding its lock for a moment before Commit.
func txnWorker(ctx context.Context, l *recordlock.Locker, id int) {
	r := rand.New(rand.NewPCG(uint64(id), 0))
	for ctx.Err() == nil {
		key := []byte(keys[r.IntN(len(keys))])
		txn, err := l.BeginTx(recordlock.TxnOptions{Name: fmt.Sprintf("counter-%d", id)})
		if err != nil {
			log.Fatal(err)
		}
		if _, err := txn.Lock(ctx, key, recordlock.Options{Lease: time.Second, Timeout: 300 * time.Millisecond}); err != nil {
			txn.Rollback() // ErrTimeout, or ctx ended the wait: try again or stop
			continue
		}
		v, err := txn.Get(key)
		if err != nil {
			log.Fatal(err)
		}
		n, _ := strconv.Atoi(string(v)) // a missing counter reads as nil: Atoi fails and gives 0
		if err := txn.Put(key, []byte(strconv.Itoa(n+1))); err != nil {
			log.Fatal(err)
		}
		time.Sleep(time.Duration(20+r.IntN(60)) * time.Millisecond)
		if err := txn.Commit(); err != nil && !errors.Is(err, recordlock.ErrLeaseExpired) {
			log.Fatal(err)
		}
	}
}

// readWorker reads a random counter in a Txn under a shared lock, which other readers of the key
// share, holding it for a moment before Commit (which checks the lock was held throughout).
func readWorker(ctx context.Context, l *recordlock.Locker, id int) {
	r := rand.New(rand.NewPCG(uint64(id), 0))
	for ctx.Err() == nil {
		key := []byte(keys[r.IntN(len(keys))])
		txn, err := l.BeginTx(recordlock.TxnOptions{Name: fmt.Sprintf("reader-%d", id)})
		if err != nil {
			log.Fatal(err)
		}
		if _, err := txn.Lock(ctx, key, recordlock.Options{Shared: true, Lease: time.Second, Timeout: 300 * time.Millisecond}); err != nil {
			txn.Rollback() // ErrTimeout, or ctx ended the wait: try again or stop
			continue
		}
		if _, err := txn.Get(key); err != nil {
			log.Fatal(err)
		}
		time.Sleep(time.Duration(20+r.IntN(60)) * time.Millisecond)
		if err := txn.Commit(); err != nil && !errors.Is(err, recordlock.ErrLeaseExpired) {
			log.Fatal(err)
		}
	}
}

// holdWorker locks a random key with Hold, keeps it a while and releases it.
func holdWorker(ctx context.Context, l *recordlock.Locker, id int) {
	r := rand.New(rand.NewPCG(uint64(id), 0))
	for ctx.Err() == nil {
		h, err := l.Lock(ctx, []byte(keys[r.IntN(len(keys))]), recordlock.Options{Hold: true, Lease: time.Second, Timeout: 300 * time.Millisecond})
		if err != nil {
			continue
		}
		time.Sleep(time.Duration(20+r.IntN(60)) * time.Millisecond)
		h.Release()
	}
}

// staller locks a key with a short lease and every other time sleeps past it, so its lease
// lapses with the key held and its fenced write (of a record beside the counter) is refused.
func staller(ctx context.Context, l *recordlock.Locker, db *grocksdb.DB) {
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	for i := 0; ctx.Err() == nil; i++ {
		key := []byte(keys[i%len(keys)])
		h, err := l.Lock(ctx, key, recordlock.Options{Lease: 150 * time.Millisecond, Timeout: 300 * time.Millisecond})
		if err != nil {
			continue
		}
		stall := 30 * time.Millisecond
		if i%2 == 1 {
			stall = 200 * time.Millisecond // past the lease
		}
		time.Sleep(stall)
		err = h.Fence(func() error { return db.Put(wo, append(key, "/last-staller"...), []byte(strconv.Itoa(i))) })
		if err != nil && !errors.Is(err, recordlock.ErrLeaseExpired) {
			log.Fatal(err)
		}
		h.Release()
	}
}

// openTempDB opens a new RocksDB database in a fresh temporary directory named with prefix. The
// func it returns closes the database and removes the directory.
func openTempDB(prefix string) (*grocksdb.DB, func(), error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, nil, err
	}
	db, err := openDB(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	return db, func() {
		db.Close()
		_ = os.RemoveAll(dir)
	}, nil
}

// openDB opens the RocksDB database in dir, creating it if it does not exist.
func openDB(dir string) (*grocksdb.DB, error) {
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	return grocksdb.OpenDb(opts, dir)
}
