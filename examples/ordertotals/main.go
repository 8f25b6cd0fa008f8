// Command ordertotals shows a range lock keeping a total free of phantoms: a Txn that totals every
// order of customer 7 holds the range of keys "order/7/…" shared while it scans and sums them and
// commits the total, so an order of customer 7 placed meanwhile (a phantom, a key that did not
// exist when the total was read) waits until the total has landed.
//
// Workers place orders, for customer 7 or for customer 8, each one Txn that locks, with one
// LockAll, the customer's order counter "order/<customer>/#count" and its new order's key, both
// inside the customer's range, and commits the order and the counter one up. A totaler commits
// totals of customer 7 side by side: each total is one Txn that locks recordlock.Prefix("order/7/")
// with Options{Shared: true}, reads the orders and the counter in it with Txn.Scan, checks that the
// counter counts the orders it read, and commits "count sum" under a key of its own.
//
// Workers that lock in one order (LockAll) never deadlock, with each other or beside the totaler's
// range: a worker holding the counter that asks for its order's key while a total waits for the
// counter passes that total rather than queue behind it. The program prints the deadlocks the
// Locker detected, and fails on any.
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

// counterName ends the key of a customer's order counter, which sorts before the customer's orders.
const counterName = "#count"

// counterOf is the key of the order counter of the customer whose keys start with prefix.
func counterOf(prefix []byte) []byte { return append(bytes.Clone(prefix), counterName...) }

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
				prefix := fmt.Appendf(nil, "order/%d/", customer)
				key := fmt.Appendf(prefix[:len(prefix):len(prefix)], "%d-%04d", w, n)
				if err := placeOrder(l, counterOf(prefix), key, 1+r.Int64N(100)); err != nil {
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
	deadlocks := l.Stats().Deadlocks
	fmt.Printf("%d orders placed and %d totals of customer 7 committed side by side in %v, with %d deadlocks\n",
		placed.Load(), committed.Load(), time.Since(start).Round(time.Millisecond), deadlocks)
	if deadlocks != 0 {
		return fmt.Errorf("%d deadlocks among workers that lock in one order", deadlocks)
	}

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

// placeOrder commits an order of amount under key and counts it in its customer's counter, in a
// Txn that locks both with one LockAll. The locks of an order of customer 7 wait while a total
// holds the customer's range.
func placeOrder(l *recordlock.Locker, counter, key []byte, amount int64) error {
	txn := l.Begin()
	defer txn.Rollback()
	if _, err := txn.LockAll(context.Background(), recordlock.Options{}, counter, key); err != nil {
		return err
	}
	count, err := counted(txn.Get(counter))
	if err != nil {
		return err
	}
	if err := txn.Put(counter, strconv.AppendInt(nil, count+1, 10)); err != nil {
		return err
	}
	if err := txn.Put(key, strconv.AppendInt(nil, amount, 10)); err != nil {
		return err
	}
	return txn.Commit()
}

// counted is the count a counter's value holds (none yet: 0), or the read's error.
func counted(value []byte, err error) (int64, error) {
	if err != nil || value == nil {
		return 0, err
	}
	return strconv.ParseInt(string(value), 10, 64)
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
	counter := counterOf(customer7)
	var count, sum, counterSays int64
	err := txn.Scan(orders, func(key, value []byte) error {
		var err error
		if bytes.Equal(key, counter) {
			counterSays, err = counted(value, nil)
			return err
		}
		amount, err := strconv.ParseInt(string(value), 10, 64)
		count, sum = count+1, sum+amount
		return err
	})
	if err != nil {
		return err
	}
	if count != counterSays && !unlocked {
		return fmt.Errorf("the total read %d orders of customer 7, and its counter says %d", count, counterSays)
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
		case bytes.HasSuffix(rec.Key, []byte("/"+counterName)): // counted with its order
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
