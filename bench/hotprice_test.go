package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"sync/atomic"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/bench/internal/rocksshared"
)

// hotPriceWorkers is how many goroutines of P11 place orders.
const hotPriceWorkers = 8

// orderKeys is how many order records P11 writes before it writes the first one again: every
// record key but the price's.
const orderKeys = nKeys - 1

// BenchmarkHotPrice (P11) is a read-mostly hot record: 8 goroutines place orders, each order one
// transaction that reads the one price record, keeps it locked until it commits, and writes an
// order record no other order of the run writes (the records after the price, in turn), holding
// the price it read. One op is one committed order, so ns/op is the time per order; the other
// metrics are orders per second, the p50 and p99 latency of an order, and the process's CPU time
// per order. The contenders differ in how they lock the price:
//
//   - shared: a recordlock Txn locks it with Options.Shared, so orders read it side by side;
//   - exclusive: the same Txn with an exclusive lock, so every order waits for every other;
//   - rocksdbshared: a RocksDB pessimistic transaction reads it with GetForUpdate(exclusive=false);
//   - rocksdbexclusive: the same with an exclusive GetForUpdate;
//   - unlocked: the same Txn with the price read and no lock on it at all, the least any lock of
//     the price can cost: shared cannot beat it, so its ratio to exclusive is the floor of P11's.
//
// Both RocksDB contenders call GetForUpdate through rocksshared, so they differ in the flag
// alone. A recordlock order locks its order record exclusively before it writes it; RocksDB's
// Put locks it. Every run gets a fresh copy of the seed database, and fails unless every order
// record written ends holding the price.
// Target: shared ≤ 0.7× exclusive and ≤ 0.85× rocksdbshared.
func BenchmarkHotPrice(b *testing.B) {
	sharedOpts := lockOpts
	sharedOpts.Shared = true
	for _, c := range []struct {
		name      string
		priceOpts *recordlock.Options // nil: the price is read unlocked
	}{{"shared", &sharedOpts}, {"exclusive", &lockOpts}, {"unlocked", nil}} {
		b.Run(c.name, func(b *testing.B) {
			db := freshDB(b)
			l := lockerOn(b, db)
			price := setPrice(b, db.Put)
			ctx := context.Background()
			var next atomic.Int64
			runOps(b, hotPriceWorkers, "orders/s", func(int) error {
				return txnOrder(ctx, l, c.priceOpts, orderKey(next.Add(1)-1))
			})
			checkOrders(b, db.NewIterator(fx.ro), price)
		})
	}
	for _, exclusive := range []bool{false, true} {
		name := "rocksdbshared"
		if exclusive {
			name = "rocksdbexclusive"
		}
		b.Run(name, func(b *testing.B) {
			tdb := freshTxnDB(b)
			price := setPrice(b, tdb.Put)
			txns := newTxnSlots(hotPriceWorkers)
			defer txns.destroy()
			var next atomic.Int64
			runOps(b, hotPriceWorkers, "orders/s", func(w int) error {
				return txns.order(tdb, w, exclusive, orderKey(next.Add(1)-1))
			})
			checkOrders(b, tdb.NewIterator(fx.ro), price)
		})
	}
}

// hotPrice is the key of the price record.
func hotPrice() []byte { return key(0) }

// orderKey is the key of the n-th order of a run (from 0): the records after the price, in turn.
func orderKey(n int64) []byte { return key(1 + int(n%orderKeys)) }

// setPrice writes the price record with put, outside the timer, and returns its value: 8 bytes
// that no seed record holds.
func setPrice(b *testing.B, put func(*grocksdb.WriteOptions, []byte, []byte) error) []byte {
	b.Helper()
	price := binary.BigEndian.AppendUint64(nil, 4200)
	if err := put(fx.wo, hotPrice(), price); err != nil {
		b.Fatal(err)
	}
	return price
}

// txnOrder is one recordlock order: a Txn that locks the price with priceOpts (unless it is
// nil), reads it, locks the order record exclusively, stages the price into it and commits,
// which writes inside the fences of its locks and releases them.
func txnOrder(ctx context.Context, l *recordlock.Locker, priceOpts *recordlock.Options, order []byte) error {
	txn := l.Begin()
	defer txn.Rollback()
	if priceOpts != nil {
		if _, err := txn.Lock(ctx, hotPrice(), *priceOpts); err != nil {
			return err
		}
	}
	p, err := txn.Get(hotPrice())
	if err != nil {
		return err
	}
	if _, err := txn.Lock(ctx, order, lockOpts); err != nil {
		return err
	}
	if err := txn.Put(order, p); err != nil {
		return err
	}
	return txn.Commit()
}

// order is one RocksDB order by worker w: a pessimistic transaction that reads the price with
// GetForUpdate, shared or exclusive, writes it into the order record (which Put locks) and
// commits, which unlocks both.
func (s txnSlots) order(tdb *grocksdb.TransactionDB, w int, exclusive bool, order []byte) error {
	s[w] = tdb.TransactionBegin(fx.wo, fx.to, s[w])
	txn := s[w]
	var buf [8]byte
	p, _, err := rocksshared.GetForUpdate(buf[:0], txn, fx.ro, hotPrice(), exclusive)
	if err != nil {
		_ = txn.Rollback()
		return err
	}
	if err := txn.Put(order, p); err != nil {
		_ = txn.Rollback()
		return err
	}
	return txn.Commit()
}

// checkOrders fails b unless the order records of its run, min(b.N, orderKeys) of them, all hold
// price, and no other record does besides the price's own: it reads every record through it,
// which it closes.
func checkOrders(b *testing.B, it *grocksdb.Iterator, price []byte) {
	b.Helper()
	defer it.Close()
	priced := 0
	for it.SeekToFirst(); it.Valid(); it.Next() {
		if bytes.Equal(it.Value().Data(), price) { // the iterator owns the value
			priced++
		}
	}
	if err := it.Err(); err != nil {
		b.Fatal(err)
	}
	if want := 1 + min(b.N, orderKeys); priced != want {
		b.Fatalf("%d records hold the price after %d orders, want %d (the price's and each order's)", priced, b.N, want)
	}
}
