package recordlock_test

import (
	"context"
	"fmt"
	"strconv"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock"
)

// A Txn totals the orders of customer 7 and keeps the set of orders stable until it commits: the
// shared range lock over their prefix keeps out every write to it, an order inserted included,
// which no lock of an existing record could stop.
func ExampleTxn_LockRange() {
	db, cleanup := exampleDB()
	defer cleanup()
	locker, err := recordlock.New(db)
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	for key, amount := range map[string]string{"order/7/1": "30", "order/7/2": "12", "order/8/1": "99"} {
		if err := db.Put(wo, []byte(key), []byte(amount)); err != nil {
			panic(err)
		}
	}

	ctx := context.Background()
	txn := locker.Begin()
	defer txn.Rollback()
	orders := recordlock.Prefix([]byte("order/7/"))
	h, err := txn.LockRange(ctx, orders, recordlock.Options{Shared: true})
	if err != nil {
		panic(err)
	}
	r, _ := h.Range()
	fmt.Printf("locked [%s, %s)\n", r.Start, r.End)
	total := 0
	err = txn.Scan(orders, func(key, value []byte) error {
		n, err := strconv.Atoi(string(value))
		total += n
		return err
	})
	if err != nil {
		panic(err)
	}
	// Another writer cannot insert an order of customer 7 until the Txn ends.
	_, err = locker.TryLock([]byte("order/7/3"), recordlock.Options{})
	fmt.Println("insert order/7/3:", err)
	if _, err := txn.Lock(ctx, []byte("total/7"), recordlock.Options{}); err != nil {
		panic(err)
	}
	if err := txn.Put([]byte("total/7"), []byte(strconv.Itoa(total))); err != nil {
		panic(err)
	}
	if err := txn.Commit(); err != nil {
		panic(err)
	}
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	v, err := db.GetBytes(ro, []byte("total/7"))
	if err != nil {
		panic(err)
	}
	fmt.Printf("total/7 = %s\n", v)
	// Output:
	// locked [order/7/, order/70)
	// insert order/7/3: recordlock: key is locked
	// total/7 = 42
}
