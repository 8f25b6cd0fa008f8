// Command transfer shows two ways to run multi-record transactions that never freeze.
//
// Several workers move money between a few bank accounts in RocksDB, each transfer one Txn that
// locks two accounts. The workload runs twice:
//
//   - sorted: Txn.LockAll takes both accounts in key order, so no two transfers ever wait for
//     each other in a cycle;
//   - natural: each transfer locks its source, then its destination. Two transfers between the
//     same accounts in opposite directions can deadlock; one of them gets ErrDeadlock at once,
//     rolls back and retries.
//
// Either way every transfer is done once and the total balance is conserved.
//
//	go run ./examples/transfer -workers 8 -accounts 4 -transfers 100
package main

import (
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

const initialBalance = 1000

func main() {
	workers := flag.Int("workers", 8, "goroutines making transfers")
	accounts := flag.Int("accounts", 4, "bank accounts")
	transfers := flag.Int("transfers", 100, "transfers per worker, in each run")
	timeout := flag.Duration("timeout", 50*time.Millisecond, "how long a transfer waits for an account before it retries")
	flag.Parse()
	if *workers < 1 || *accounts < 2 || *transfers < 0 {
		log.Fatal("transfer: -workers must be positive, -accounts at least 2, -transfers not negative")
	}
	if err := run(*workers, *accounts, *transfers, *timeout); err != nil {
		log.Fatal("transfer: ", err)
	}
}

func run(workers, accounts, transfers int, timeout time.Duration) error {
	db, closeDB, err := openTempDB("recordlock-transfer-")
	if err != nil {
		return err
	}
	defer closeDB()
	l, err := recordlock.New(db)
	if err != nil {
		return err
	}
	defer l.Close()

	for _, sorted := range []bool{true, false} {
		b := bank{l: l, accounts: accounts, opts: recordlock.Options{Timeout: timeout}, sorted: sorted}
		if err := b.open(db); err != nil {
			return err
		}
		start := time.Now()
		if err := b.run(workers, transfers); err != nil {
			return err
		}
		elapsed := time.Since(start)
		total, err := b.total()
		if err != nil {
			return err
		}
		name := "natural order + retry"
		if sorted {
			name = "LockAll (sorted)"
		}
		fmt.Printf("%-22s %d transfers in %v, total %d of %d (conserved: %t), %d deadlocks detected, %d timeouts\n",
			name+":", b.done.Load(), elapsed.Round(time.Millisecond), total, accounts*initialBalance,
			total == accounts*initialBalance, b.deadlocks.Load(), b.timeouts.Load())
	}
	return nil
}

// bank is one run of the workload.
type bank struct {
	l         *recordlock.Locker
	accounts  int
	opts      recordlock.Options
	sorted    bool // lock with LockAll; else source then destination
	done      atomic.Int64
	deadlocks atomic.Int64
	timeouts  atomic.Int64
}

func (b *bank) key(i int) []byte { return fmt.Appendf(nil, "account/%d", i) }

// open gives every account its initial balance.
func (b *bank) open(db *grocksdb.DB) error {
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	for i := range b.accounts {
		if err := db.Put(wo, b.key(i), strconv.AppendInt(nil, initialBalance, 10)); err != nil {
			return err
		}
	}
	return nil
}

func (b *bank) run(workers, transfers int) error {
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range transfers {
				from := r.IntN(b.accounts)
				to := (from + 1 + r.IntN(b.accounts-1)) % b.accounts
				if err := b.transfer(from, to, 1+r.IntN(100)); err != nil {
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

// transfer moves amount from one account to another, retrying after a deadlock or a timeout.
// A retry waits a random moment, growing with each attempt, so that the Txns of a cycle do not
// start again in step and close the same cycle at once.
func (b *bank) transfer(from, to, amount int) error {
	for attempt := 1; ; attempt++ {
		err := b.try(from, to, amount)
		switch {
		case err == nil:
			b.done.Add(1)
			return nil
		case errors.Is(err, recordlock.ErrDeadlock):
			b.deadlocks.Add(1)
		case errors.Is(err, recordlock.ErrTimeout):
			b.timeouts.Add(1)
		default:
			return err
		}
		time.Sleep(rand.N(time.Duration(min(attempt, 10)) * 20 * time.Microsecond))
	}
}

func (b *bank) try(from, to, amount int) error {
	ctx := context.Background()
	txn := b.l.Begin()
	defer txn.Rollback() // after an error: releases what was locked, so the retry starts clean
	src, dst := b.key(from), b.key(to)
	if b.sorted {
		if _, err := txn.LockAll(ctx, b.opts, src, dst); err != nil {
			return err
		}
	} else {
		if _, err := txn.Lock(ctx, src, b.opts); err != nil {
			return err
		}
		if _, err := txn.Lock(ctx, dst, b.opts); err != nil {
			return err
		}
	}
	s, err := balance(txn, src)
	if err != nil {
		return err
	}
	d, err := balance(txn, dst)
	if err != nil {
		return err
	}
	if err := txn.Put(src, strconv.AppendInt(nil, int64(s-amount), 10)); err != nil {
		return err
	}
	if err := txn.Put(dst, strconv.AppendInt(nil, int64(d+amount), 10)); err != nil {
		return err
	}
	return txn.Commit()
}

func balance(txn *recordlock.Txn, key []byte) (int, error) {
	v, err := txn.Get(key)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(v))
}

// total reads back the sum of every balance.
func (b *bank) total() (int, error) {
	txn := b.l.Begin()
	defer txn.Rollback()
	sum := 0
	for i := range b.accounts {
		n, err := balance(txn, b.key(i))
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
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
