// Command ordertotals shows a range lock keeping a total free of phantoms: a Txn that totals every
// order of customer 7 holds the range of keys "order/7/…" shared while it scans and sums them and
// commits the total, so an order of customer 7 placed meanwhile (a phantom, a key that did not
// exist when the total was read) waits until the total has landed.
//
// Workers place orders, each one Txn that locks its new order's key and commits the order, for
// customer 7 or for customer 8. A totaler commits totals of customer 7 side by side: each total is
// one Txn that locks recordlock.Prefix("order/7/") with Options{Shared: true}, reads the orders in
// it with Txn.Scan, and commits "count sum" under a key of its own.
//
// Afterwards the program replays RocksDB's write-ahead log, which holds every commit in the order
// it landed, and checks that every total equals the orders of customer 7 present when its commit
// landed. Without the range lock an order placed between the scan and the commit lands first, and
// the total misses it: -unlocked runs the totals without it, to watch the replay catch that.
//
//	go run ./examples/ordertotals -workers 4 -orders 200 -totals 100
//	go run ./examples/ordertotals -unlocked
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock"
)

// customer7 starts the key of every order of customer 7, the orders the totals sum.
var customer7 = []byte("order/7/")

func main() {
	workers := flag.Int("workers", 4, "goroutines placing orders")
	orders := flag.Int("orders", 200, "orders each worker places, for customer 7 or 8 at random")
	totals := flag.Int("totals", 100, "totals of customer 7 committed while the orders are placed")
	unlocked := flag.Bool("unlocked", false, "total without the range lock, to see the replay catch a phantom")
	flag.Parse()
	if *workers < 1 || *orders < 0 || *totals < 0 {
		log.Fatal("ordertotals: -workers must be positive, -orders and -totals not negative")
	}
	if err := run(*workers, *orders, *totals, *unlocked); err != nil {
		log.Fatal("ordertotals: ", err)
	}
}

func run(workers, orders, totals int, unlocked bool) error {
	db, closeDB, err := openTempDB("recordlock-ordertotals-")
	if err != nil {
		return err
	}
	defer closeDB()
	l, err := recordlock.New(db)
	if err != nil {
		return err
	}
	defer l.Close()

	start := time.Now()
	var placed, committed atomic.Int64
	errs := make(chan error, workers+1)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for n := range orders {
				customer := 7 + r.IntN(2)
				key := fmt.Appendf(nil, "order/%d/%d-%04d", customer, w, n)
				if err := placeOrder(l, key, 1+r.Int64N(100)); err != nil {
					errs <- err
					return
				}
				placed.Add(1)
			}
		})
	}
	wg.Go(func() {
		for n := range totals {
			if err := commitTotal(l, fmt.Appendf(nil, "total/7/%04d", n), unlocked); err != nil {
				errs <- err
				return
			}
			committed.Add(1)
		}
	})
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Printf("%d orders placed and %d totals of customer 7 committed side by side in %v\n",
		placed.Load(), committed.Load(), time.Since(start).Round(time.Millisecond))

	rep, err := checkLog(db)
	if unlocked {
		if err == nil {
			return errors.New("without the range lock, no total missed an order this time: run it again")
		}
		fmt.Println("without the range lock, the replay found:", err)
		return nil
	}
	if err != nil {
		return err
	}
	if rep.orders != placed.Load() || rep.totals != committed.Load() {
		return fmt.Errorf("the log holds %d orders and %d totals, %d and %d were committed",
			rep.orders, rep.totals, placed.Load(), committed.Load())
	}
	fmt.Printf("replayed %d commits in log order: each of the %d totals equals the orders of customer 7 present when it landed (the last: %s)\n",
		rep.orders+rep.totals, rep.totals, rep.last)
	return nil
}

// placeOrder commits an order of amount under key, in a Txn that locks the key. The key lock of an
// order of customer 7 waits while a total holds the customer's range.
func placeOrder(l *recordlock.Locker, key []byte, amount int64) error {
	txn := l.Begin()
	defer txn.Rollback()
	if _, err := txn.Lock(context.Background(), key, recordlock.Options{}); err != nil {
		return err
	}
	if err := txn.Put(key, strconv.AppendInt(nil, amount, 10)); err != nil {
		return err
	}
	return txn.Commit()
}

// commitTotal totals the orders of customer 7 under a shared lock of their range (none when
// unlocked), and commits "count sum" under key before the lock is given back.
func commitTotal(l *recordlock.Locker, key []byte, unlocked bool) error {
	ctx := context.Background()
	txn := l.Begin()
	defer txn.Rollback()
	orders := recordlock.Prefix(customer7)
	if !unlocked {
		if _, err := txn.LockRange(ctx, orders, recordlock.Options{Shared: true}); err != nil {
			return err
		}
	}
	var count, sum int64
	err := txn.Scan(orders, func(_, value []byte) error {
		amount, err := strconv.ParseInt(string(value), 10, 64)
		count, sum = count+1, sum+amount
		return err
	})
	if err != nil {
		return err
	}
	if _, err := txn.Lock(ctx, key, recordlock.Options{}); err != nil {
		return err
	}
	if err := txn.Put(key, fmt.Appendf(nil, "%d %d", count, sum)); err != nil {
		return err
	}
	return txn.Commit()
}

// replay is what checkLog found in the log.
type replay struct {
	orders, totals int64
	last           string // the last total, as committed
	count, sum     int64  // of the orders of customer 7 so far
}

// checkLog replays every commit of db in the order it landed, keeping the orders of customer 7,
// and checks each total against them as they stood when the total's commit landed.
func checkLog(db *grocksdb.DB) (replay, error) {
	var r replay
	it, err := db.GetUpdatesSince(0)
	if err != nil {
		return r, err
	}
	defer it.Destroy()
	for ; it.Valid(); it.Next() {
		batch, seq := it.GetBatch()
		err := r.apply(batch, seq)
		batch.Destroy()
		if err != nil {
			return r, err
		}
	}
	return r, it.Err()
}

// apply replays the records of batch, which landed at sequence number seq.
func (r *replay) apply(batch *grocksdb.WriteBatch, seq uint64) error {
	records := batch.NewIterator()
	for records.Next() {
		rec := records.Record()
		if rec.Type != grocksdb.WriteBatchValueRecord {
			return fmt.Errorf("sequence number %d: a record of type %d, which no Txn here writes", seq, rec.Type)
		}
		switch {
		case bytes.HasPrefix(rec.Key, []byte("total/")):
			if want := fmt.Sprintf("%d %d", r.count, r.sum); string(rec.Value) != want {
				return fmt.Errorf("total %s at sequence number %d is %q (orders, sum), but customer 7 had %q when it landed: a phantom",
					rec.Key, seq, rec.Value, want)
			}
			r.totals++
			r.last = string(rec.Value)
		case bytes.HasPrefix(rec.Key, customer7):
			amount, err := strconv.ParseInt(string(rec.Value), 10, 64)
			if err != nil {
				return err
			}
			r.count, r.sum = r.count+1, r.sum+amount
			r.orders++
		default:
			r.orders++
		}
	}
	return records.Error()
}

// openTempDB opens a new RocksDB database in a fresh temporary directory named with prefix. The
// func it returns closes the database and removes the directory.
func openTempDB(prefix string) (*grocksdb.DB, func(), error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, nil, err
	}
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	db, err := grocksdb.OpenDb(opts, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	return db, func() {
		db.Close()
		_ = os.RemoveAll(dir)
	}, nil
}
