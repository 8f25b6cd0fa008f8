// Command orders shows shared locks on a read-mostly record: many orders read one price and keep
// it locked until they commit, side by side, while a few price changes take it exclusively.
//
// Workers place orders in RocksDB, each order one Txn that locks the price with
// Options{Shared: true}, reads it, works a moment (-work) and commits an order record holding the
// price it read. Two updaters raise the price now and then, each change one Txn: one way locks the
// price shared to read it and then upgrades that lock (Txn.Lock without Shared of a key the Txn
// holds shared), the other locks it exclusively from the start. When both updaters upgrade at
// once, one of them gets ErrDeadlock, rolls back and tries again.
//
// The workload runs twice, the orders locking the price shared and then exclusively, to show
// what sharing buys: with -work 200µs, shared orders overlap and finish several times sooner.
// After each run the program replays RocksDB's write-ahead log, which holds every commit in the
// order it landed, and checks that every order holds the price current when it committed (the
// shared lock keeps the price from changing between the read and the commit) and that no price
// change was lost.
//
//	go run ./examples/orders -workers 8 -orders 100 -updates 10 -work 200us
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

var priceKey = []byte("price")

const initialPrice = 100

func main() {
	workers := flag.Int("workers", 8, "goroutines placing orders")
	orders := flag.Int("orders", 100, "orders per worker, in each run")
	updates := flag.Int("updates", 10, "price changes per updater (there are two), in each run")
	work := flag.Duration("work", 200*time.Microsecond, "how long an order works while it holds the price")
	flag.Parse()
	if *workers < 1 || *orders < 0 || *updates < 0 || *work < 0 {
		log.Fatal("orders: -workers must be positive, -orders, -updates and -work not negative")
	}
	if err := run(*workers, *orders, *updates, *work); err != nil {
		log.Fatal("orders: ", err)
	}
}

func run(workers, orders, updates int, work time.Duration) error {
	db, closeDB, err := openTempDB("recordlock-orders-")
	if err != nil {
		return err
	}
	defer closeDB()
	l, err := recordlock.New(db)
	if err != nil {
		return err
	}
	defer l.Close()
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	if err := db.Put(wo, priceKey, strconv.AppendInt(nil, initialPrice, 10)); err != nil {
		return err
	}

	for _, shared := range []bool{true, false} {
		s := shop{l: l, shared: shared, work: work}
		startPrice, err := s.price()
		if err != nil {
			return err
		}
		since := db.GetLatestSequenceNumber() + 1 // the first commit of this run
		start := time.Now()
		if err := s.run(workers, orders, updates); err != nil {
			return err
		}
		elapsed := time.Since(start)
		name := "price exclusive:"
		if shared {
			name = "price shared:"
		}
		fmt.Printf("%-17s %d orders in %v, up to %d holding the price at once; %d price changes (%d by upgrade, %d exclusive), %d upgrade deadlocks retried\n",
			name, s.placed.Load(), elapsed.Round(time.Millisecond), s.mostInside.Load(),
			s.upgraded.Load()+s.exclusive.Load(), s.upgraded.Load(), s.exclusive.Load(), s.deadlocks.Load())

		replayed, err := checkLog(db, since, s.prefix(), startPrice)
		if err != nil {
			return err
		}
		if replayed.orders != s.placed.Load() {
			return fmt.Errorf("the log holds %d orders, %d were placed", replayed.orders, s.placed.Load())
		}
		changes := s.upgraded.Load() + s.exclusive.Load()
		if replayed.changes != changes || replayed.price != startPrice+changes {
			return fmt.Errorf("the log holds %d price changes ending at %d, want %d ending at %d",
				replayed.changes, replayed.price, changes, startPrice+changes)
		}
		fmt.Printf("%-17s replayed %d commits in log order: every order holds the price current at its commit; price %d = %d + %d changes\n",
			"", replayed.orders+replayed.changes, replayed.price, startPrice, changes)
	}
	return nil
}

// shop is one run of the workload.
type shop struct {
	l      *recordlock.Locker
	shared bool // orders lock the price shared; else exclusively
	work   time.Duration

	placed     atomic.Int64
	inside     atomic.Int64 // orders holding the price now
	mostInside atomic.Int64 // the most orders seen holding it at once
	upgraded   atomic.Int64 // price changes made by upgrading a shared lock
	exclusive  atomic.Int64 // price changes made under an exclusive lock from the start
	deadlocks  atomic.Int64
}

// prefix starts the key of every order of this run.
func (s *shop) prefix() []byte {
	if s.shared {
		return []byte("order/shared/")
	}
	return []byte("order/exclusive/")
}

func (s *shop) run(workers, orders, updates int) error {
	errs := make(chan error, workers+2)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for n := range orders {
				if err := s.order(fmt.Appendf(s.prefix(), "%d/%d", w, n)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for u := range 2 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(u), 11))
			for i := range updates {
				time.Sleep(rand.N(10 * s.work)) // spread the changes over the run
				if err := s.change(u, i%2 == 0, r); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// order places one order: a Txn that locks the price, reads it, works while it holds it, and
// commits the order record with the price it read.
func (s *shop) order(key []byte) error {
	ctx := context.Background()
	txn := s.l.Begin()
	defer txn.Rollback()
	if _, err := txn.Lock(ctx, priceKey, recordlock.Options{Shared: s.shared}); err != nil {
		return err
	}
	p, err := txn.Get(priceKey)
	if err != nil {
		return err
	}
	n := s.inside.Add(1)
	for m := s.mostInside.Load(); n > m && !s.mostInside.CompareAndSwap(m, n); m = s.mostInside.Load() {
	}
	time.Sleep(s.work) // reading the rest of what an order needs
	s.inside.Add(-1)
	if _, err := txn.Lock(ctx, key, recordlock.Options{}); err != nil {
		return err
	}
	if err := txn.Put(key, p); err != nil {
		return err
	}
	if err := txn.Commit(); err != nil {
		return err
	}
	s.placed.Add(1)
	return nil
}

// change raises the price by one, upgrading a shared lock or under an exclusive one, and retries
// after an upgrade deadlock, following a random pause so that the two updaters do not meet again.
func (s *shop) change(updater int, upgrade bool, r *rand.Rand) error {
	for {
		err := s.tryChange(updater, upgrade)
		if !errors.Is(err, recordlock.ErrDeadlock) {
			return err
		}
		s.deadlocks.Add(1)
		time.Sleep(time.Duration(r.IntN(100)) * time.Microsecond)
	}
}

func (s *shop) tryChange(updater int, upgrade bool) error {
	ctx := context.Background()
	txn, err := s.l.BeginTx(recordlock.TxnOptions{Name: fmt.Sprintf("updater-%d", updater)})
	if err != nil {
		return err
	}
	defer txn.Rollback() // after ErrDeadlock: gives back the share the other updater waits for
	var p int64
	if upgrade {
		if _, err := txn.Lock(ctx, priceKey, recordlock.Options{Shared: true}); err != nil {
			return err
		}
		if p, err = priceOf(txn); err != nil {
			return err
		}
		time.Sleep(s.work) // deciding the new price, while other orders read the old one
	}
	// Exclusive: an upgrade of the share taken above, or the first lock of the price.
	h, err := txn.Lock(ctx, priceKey, recordlock.Options{})
	if err != nil {
		return err
	}
	if h.Shared() {
		return errors.New("an upgraded lock still reports Shared")
	}
	q, err := priceOf(txn)
	if err != nil {
		return err
	}
	if upgrade && q != p {
		return fmt.Errorf("the price moved under a shared lock: %d, then %d", p, q)
	}
	p = q
	if err := txn.Put(priceKey, strconv.AppendInt(nil, p+1, 10)); err != nil {
		return err
	}
	if err := txn.Commit(); err != nil {
		return err
	}
	if upgrade {
		s.upgraded.Add(1)
	} else {
		s.exclusive.Add(1)
	}
	return nil
}

// price reads the price in a Txn of its own.
func (s *shop) price() (int64, error) {
	txn := s.l.Begin()
	defer txn.Rollback()
	return priceOf(txn)
}

func priceOf(txn *recordlock.Txn) (int64, error) {
	v, err := txn.Get(priceKey)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(v), 10, 64)
}

// replay is what checkLog found in the log.
type replay struct {
	orders, changes, price int64
}

// checkLog replays the commits from sequence number since on, in the order they landed, and
// checks that every order (a write of a key with prefix) holds the price current at its commit:
// the price starts at startPrice, and each write of the price changes it.
func checkLog(db *grocksdb.DB, since uint64, prefix []byte, startPrice int64) (replay, error) {
	r := replay{price: startPrice}
	if since > db.GetLatestSequenceNumber() {
		return r, nil // nothing was committed
	}
	it, err := db.GetUpdatesSince(since)
	if err != nil {
		return r, err
	}
	defer it.Destroy()
	for ; it.Valid(); it.Next() {
		batch, _ := it.GetBatch()
		err := replayBatch(batch, prefix, &r)
		batch.Destroy()
		if err != nil {
			return r, err
		}
	}
	return r, it.Err()
}

func replayBatch(batch *grocksdb.WriteBatch, prefix []byte, r *replay) error {
	records := batch.NewIterator()
	for records.Next() {
		rec := records.Record()
		if rec.Type != grocksdb.WriteBatchValueRecord {
			continue
		}
		switch {
		case bytes.Equal(rec.Key, priceKey):
			p, err := strconv.ParseInt(string(rec.Value), 10, 64)
			if err != nil {
				return err
			}
			r.price = p
			r.changes++
		case bytes.HasPrefix(rec.Key, prefix):
			p, err := strconv.ParseInt(string(rec.Value), 10, 64)
			if err != nil {
				return err
			}
			if p != r.price {
				return fmt.Errorf("order %s was priced at %d, but the price was %d when it committed", rec.Key, p, r.price)
			}
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
