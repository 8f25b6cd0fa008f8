// Command counter shows that fenced transactions lose no update even when lock holders stall.
//
// Several workers increment a few shared counters in RocksDB, each increment a read-modify-write
// Txn under a short lease. Now and then a worker stalls past its lease before committing: its
// key passes to the next worker, and its stale commit is fenced (ErrLeaseExpired) instead of
// overwriting the newer value; the worker then retries. The total read back always equals the
// number of increments asked for.
//
//	go run ./examples/counter -workers 8 -counters 4 -increments 500
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock"
)

func main() {
	dbPath := flag.String("db", "", "RocksDB directory (default: a temporary one, removed at exit)")
	workers := flag.Int("workers", 8, "goroutines incrementing the counters")
	counters := flag.Int("counters", 4, "shared counters")
	increments := flag.Int("increments", 500, "increments per worker")
	lease := flag.Duration("lease", recordlock.MinLease, "lease of each increment's lock")
	stallEvery := flag.Int("stall-every", 100, "a worker stalls past its lease once every this many increments (0: never)")
	flag.Parse()
	if *workers < 1 || *counters < 1 || *increments < 0 || *stallEvery < 0 {
		log.Fatal("counter: -workers and -counters must be positive, -increments and -stall-every not negative")
	}
	if err := run(*dbPath, *workers, *counters, *increments, *lease, *stallEvery); err != nil {
		log.Fatal("counter: ", err)
	}
}

func run(dbPath string, workers, counters, increments int, lease time.Duration, stallEvery int) error {
	var db *grocksdb.DB
	if dbPath == "" {
		tmp, closeDB, err := openTempDB("recordlock-counter-")
		if err != nil {
			return err
		}
		defer closeDB()
		db = tmp
	} else {
		opened, err := openDB(dbPath)
		if err != nil {
			return err
		}
		defer opened.Close()
		db = opened
	}
	l, err := recordlock.New(db)
	if err != nil {
		return err
	}
	defer l.Close()

	keys := make([][]byte, counters)
	before := make([]int, counters) // a -db that already has counters starts from their values
	for c := range keys {
		keys[c] = []byte("counter/" + strconv.Itoa(c))
		if before[c], err = readCounter(l, keys[c]); err != nil {
			return err
		}
	}

	fmt.Printf("%d workers x %d increments over %d counters, lease %v, a stall of %v every %d increments\n",
		workers, increments, counters, lease, stallFor(lease), stallEvery)
	var (
		fenced atomic.Int64
		wg     sync.WaitGroup
		errs   = make(chan error, workers)
	)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := range increments {
				key := keys[(w+i)%counters]
				stall := stallEvery > 0 && i%stallEvery == stallEvery-1
				for {
					err := increment(l, key, lease, stall)
					if errors.Is(err, recordlock.ErrLeaseExpired) {
						fenced.Add(1) // the stale write was refused; read again and retry
						stall = false
						continue
					}
					if err != nil {
						errs <- fmt.Errorf("worker %d: %w", w, err)
						return
					}
					break
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return err
	}

	total := 0
	for c, key := range keys {
		v, err := readCounter(l, key)
		if err != nil {
			return err
		}
		total += v - before[c]
	}
	expected := workers * increments
	fmt.Printf("expected total:  %d\n", expected)
	fmt.Printf("total read back: %d\n", total)
	fmt.Printf("refused commits: %d (stale writes of stalled holders, fenced with ErrLeaseExpired, each retried)\n", fenced.Load())
	fmt.Printf("elapsed:         %v\n", elapsed.Round(time.Millisecond))
	if total != expected {
		return fmt.Errorf("lost updates: read back %d, expected %d", total, expected)
	}
	return nil
}

// stallFor is how long a stalling worker sleeps before it commits: well past its lease.
func stallFor(lease time.Duration) time.Duration { return lease + lease/2 }

// increment adds one to the counter at key in one fenced transaction. With stall it sleeps past
// its lease before committing, as a holder stuck in a GC pause or a slow call would.
func increment(l *recordlock.Locker, key []byte, lease time.Duration, stall bool) error {
	txn := l.Begin()
	defer txn.Rollback()
	if _, err := txn.Lock(context.Background(), key, recordlock.Options{Lease: lease}); err != nil {
		return err
	}
	v, err := txn.Get(key)
	if err != nil {
		return err
	}
	n, err := parseCounter(v)
	if err != nil {
		return err
	}
	if err := txn.Put(key, strconv.AppendInt(nil, int64(n+1), 10)); err != nil {
		return err
	}
	if stall {
		time.Sleep(stallFor(lease))
	}
	return txn.Commit()
}

// readCounter reads a counter's committed value.
func readCounter(l *recordlock.Locker, key []byte) (int, error) {
	txn := l.Begin()
	defer txn.Rollback()
	v, err := txn.Get(key)
	if err != nil {
		return 0, err
	}
	return parseCounter(v)
}

func parseCounter(v []byte) (int, error) {
	if v == nil {
		return 0, nil
	}
	return strconv.Atoi(string(v))
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
