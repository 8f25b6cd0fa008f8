package recordlock_test

import (
	"context"
	"fmt"
	"strconv"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock"
)

func ExampleTxn_Scan() {
	db, cleanup := exampleDB()
	defer cleanup()
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	for key, amount := range map[string]string{"order/7/1": "30", "order/7/2": "12", "order/8/1": "99"} {
		if err := db.Put(wo, []byte(key), []byte(amount)); err != nil {
			panic(err)
		}
	}
	locker, err := recordlock.New(db)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	txn := locker.Begin()
	defer txn.Rollback()
	ctx := context.Background()
	// The Txn adds an order of customer 7 and cancels another; its scan reads its own writes.
	for _, key := range []string{"order/7/1", "order/7/3"} {
		if _, err := txn.Lock(ctx, []byte(key), recordlock.Options{}); err != nil {
			panic(err)
		}
	}
	if err := txn.Put([]byte("order/7/3"), []byte("5")); err != nil {
		panic(err)
	}
	if err := txn.Delete([]byte("order/7/1")); err != nil {
		panic(err)
	}

	total := 0
	err = txn.Scan(recordlock.Prefix([]byte("order/7/")), func(key, value []byte) error {
		amount, err := strconv.Atoi(string(value))
		fmt.Printf("%s: %d\n", key, amount)
		total += amount
		return err
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("total:", total)
	if err := txn.Commit(); err != nil {
		panic(err)
	}
	// Output:
	// order/7/2: 12
	// order/7/3: 5
	// total: 17
}
