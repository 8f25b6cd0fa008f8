package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock"
)

// The P9 workload: bank transfers between a few hot accounts, each transfer a transaction that
// locks its source and then its destination, so two transfers between the same accounts in
// opposite directions deadlock; the loser retries.
const (
	p9Workers  = 8
	p9Accounts = 16
	// p9Timeout bounds each lock wait. A wait this long is a deadlock that went undetected, or a
	// machine too loaded to matter; either way the transfer rolls back and retries.
	p9Timeout = 10 * time.Millisecond
)

// BenchmarkDeadlockProneTransfers (P9) runs deadlock-prone transfers, 8 goroutines over 16 accounts, each transfer one
// transaction that reads and rewrites both balances. One op is one committed transfer; the
// metrics are committed transfers per second, the p50 and p99 latency of a transfer from its
// first attempt to its commit, and the retries per transfer (deadlocks and timeouts); for the
// recordlock contenders also the table's counts per transfer (reportLockCounts).
// Target: recordlock ≥ 1.5× rocksdb's transfers/s, lockall ≥ 2.5× rocksdb's.
func BenchmarkDeadlockProneTransfers(b *testing.B) {
	// recordlock locks from→to in a Txn and relies on deadlock detection: ErrDeadlock at once
	// for one Txn of each cycle, which rolls back and retries.
	b.Run("recordlock", func(b *testing.B) {
		l := lockerOn(b, freshDB(b))
		opts := recordlock.Options{Timeout: p9Timeout}
		runTransfers(b, func(_ int, from, to []byte) (bool, error) {
			return rlTransfer(l, from, to, func(txn *recordlock.Txn) error {
				if _, err := txn.Lock(context.Background(), from, opts); err != nil {
					return err
				}
				_, err := txn.Lock(context.Background(), to, opts)
				return err
			})
		})
		reportLockCounts(b, l)
	})
	// lockall locks both accounts with LockAll, in key order: no deadlock can form.
	b.Run("lockall", func(b *testing.B) {
		l := lockerOn(b, freshDB(b))
		opts := recordlock.Options{Timeout: p9Timeout}
		runTransfers(b, func(_ int, from, to []byte) (bool, error) {
			return rlTransfer(l, from, to, func(txn *recordlock.Txn) error {
				_, err := txn.LockAll(context.Background(), opts, from, to)
				return err
			})
		})
		reportLockCounts(b, l)
	})
	// rocksdb is RocksDB's pessimistic transaction with deadlock detection: GetForUpdate of
	// from, then of to; Commit writes and unlocks.
	b.Run("rocksdb", func(b *testing.B) {
		tdb := freshTxnDB(b)
		to := grocksdb.NewDefaultTransactionOptions()
		defer to.Destroy()
		to.SetDeadlockDetect(true)
		to.SetLockTimeout(p9Timeout.Milliseconds())
		txns := make([]*grocksdb.Transaction, p9Workers) // one reusable transaction per worker
		defer func() {
			for _, txn := range txns {
				if txn != nil {
					txn.Destroy()
				}
			}
		}()
		runTransfers(b, func(w int, from, toKey []byte) (bool, error) {
			txns[w] = tdb.TransactionBegin(fx.wo, to, txns[w])
			return rdbTransfer(txns[w], from, toKey)
		})
	})
}

// reportLockCounts reports, per committed transfer, the deadlocks and lock timeouts of l's table
// and the contended grants, with the mean time a contended grant waited. Unlike the times, these
// counts move little with the load of the machine, so they show what a policy changes.
func reportLockCounts(b *testing.B, l *recordlock.Locker) {
	s := l.Stats()
	n := float64(b.N)
	b.ReportMetric(float64(s.Deadlocks)/n, "deadlocks/op")
	b.ReportMetric(float64(s.Timeouts)/n, "timeouts/op")
	b.ReportMetric(float64(s.Contended)/n, "waits/op")
	if s.Contended > 0 {
		b.ReportMetric(us(s.WaitTime/time.Duration(s.Contended)), "us/wait")
	}
}

// rlTransfer is one attempt of a recordlock transfer: lock, read both balances, write both,
// commit. It reports whether to retry.
func rlTransfer(l *recordlock.Locker, from, to []byte, lock func(*recordlock.Txn) error) (bool, error) {
	txn := l.Begin()
	defer txn.Rollback()
	if err := lock(txn); err != nil {
		return retryable(err)
	}
	a, err := txn.Get(from)
	if err != nil {
		return false, err
	}
	c, err := txn.Get(to)
	if err != nil {
		return false, err
	}
	var buf [16]byte
	if err := txn.Put(from, moved(buf[:0], a, -1)); err != nil {
		return false, err
	}
	if err := txn.Put(to, moved(buf[8:8], c, +1)); err != nil {
		return false, err
	}
	if err := txn.Commit(); err != nil {
		return retryable(err)
	}
	return false, nil
}

func retryable(err error) (bool, error) {
	if errors.Is(err, recordlock.ErrDeadlock) || errors.Is(err, recordlock.ErrTimeout) || errors.Is(err, recordlock.ErrLeaseExpired) {
		return true, nil
	}
	return false, err
}

// rdbTransfer is one attempt of a RocksDB transfer on a begun transaction. It reports whether to
// retry; a failed attempt is rolled back.
func rdbTransfer(txn *grocksdb.Transaction, from, to []byte) (bool, error) {
	fail := func(err error) (bool, error) {
		_ = txn.Rollback()
		// RocksDB reports a detected deadlock as Busy ("Deadlock"), a lock wait that ran out as
		// TimedOut; both are worth a retry.
		msg := err.Error()
		if strings.Contains(msg, "Deadlock") || strings.Contains(msg, "Busy") || strings.Contains(msg, "TimedOut") || strings.Contains(msg, "Timeout") {
			return true, nil
		}
		return false, err
	}
	a, err := txn.GetForUpdate(fx.ro, from)
	if err != nil {
		return fail(err)
	}
	c, err := txn.GetForUpdate(fx.ro, to)
	if err != nil {
		a.Free()
		return fail(err)
	}
	var buf [16]byte
	next := moved(buf[:0], a.Data(), -1)
	nextTo := moved(buf[8:8], c.Data(), +1)
	a.Free()
	c.Free()
	if err := txn.Put(from, next); err != nil {
		return fail(err)
	}
	if err := txn.Put(to, nextTo); err != nil {
		return fail(err)
	}
	if err := txn.Commit(); err != nil {
		return fail(err)
	}
	return false, nil
}

// moved appends the 8-byte balance in v plus delta (wrapping: only the total matters) to dst.
func moved(dst, v []byte, delta int64) []byte {
	var n uint64
	if len(v) == 8 {
		n = binary.BigEndian.Uint64(v)
	}
	return binary.BigEndian.AppendUint64(dst, n+uint64(delta))
}

// runTransfers runs b.N committed transfers on p9Workers goroutines, each between two distinct
// random accounts in from→to order, retrying an attempt while it asks to, and reports the
// metrics of BenchmarkDeadlockProneTransfers. attempt gets the number of the worker that calls it.
func runTransfers(b *testing.B, attempt func(worker int, from, to []byte) (retry bool, err error)) {
	var next, retries atomic.Int64
	lat := make([][]time.Duration, p9Workers)
	for w := range lat {
		lat[w] = make([]time.Duration, 0, b.N/p9Workers+1)
	}
	var failed atomic.Pointer[error]
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range p9Workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for next.Add(1) <= int64(b.N) {
				i := r.IntN(p9Accounts)
				j := (i + 1 + r.IntN(p9Accounts-1)) % p9Accounts
				from, to := key(i), key(j)
				t0 := time.Now()
				for {
					retry, err := attempt(w, from, to)
					if err != nil {
						failed.CompareAndSwap(nil, &err)
						return
					}
					if !retry {
						break
					}
					retries.Add(1)
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	reportThroughput(b, "transfers/s", elapsed, lat)
	b.ReportMetric(float64(retries.Load())/float64(b.N), "retries/op")
}
