package httpdebug_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/httpdebug"
)

// The handler mounted under /debug/, read as JSON while one Txn waits for another's key.
func ExampleHandler() {
	dir, err := os.MkdirTemp("", "httpdebug-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	opts := grocksdb.NewDefaultOptions()
	opts.SetCreateIfMissing(true)
	db, err := grocksdb.OpenDb(opts, dir)
	opts.Destroy()
	if err != nil {
		panic(err)
	}
	defer db.Close()
	locker, err := recordlock.New(db)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	ctx := context.Background()
	holder, _ := locker.BeginTx(recordlock.TxnOptions{Name: "transfer-1"})
	defer holder.Rollback()
	if _, err := holder.Lock(ctx, []byte("account:7"), recordlock.Options{}); err != nil {
		panic(err)
	}
	waiter, _ := locker.BeginTx(recordlock.TxnOptions{Name: "transfer-2"})
	waited := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx, []byte("account:7"), recordlock.Options{Timeout: time.Minute})
		waited <- err
	}()
	for locker.Stats().Waiting == 0 {
		time.Sleep(time.Millisecond)
	}

	mux := http.NewServeMux()
	mux.Handle("/debug/recordlock/", httpdebug.Handler(map[string]*recordlock.Locker{"orders": locker}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/debug/recordlock/?format=json")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Databases []struct {
			Name  string
			Locks []struct{ Key, Owner string }
			Waits []struct{ Key, Owner string }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		panic(err)
	}
	d := doc.Databases[0]
	fmt.Printf("%s: %s holds %s; %s waits for %s\n", d.Name, d.Locks[0].Owner, d.Locks[0].Key, d.Waits[0].Owner, d.Waits[0].Key)

	holder.Rollback()
	fmt.Println("after the holder rolled back:", <-waited)
	waiter.Rollback()
	// Output:
	// orders: transfer-1 holds account:7; transfer-2 waits for account:7
	// after the holder rolled back: <nil>
}
