// Command basic shows recordlock's core behaviour on a real RocksDB: two goroutines contending for
// one record, a stalled holder losing its lease to a waiter, and the stalled holder's late write
// being refused by the fence.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock"
)

func main() {
	db, closeDB, err := openTempDB("recordlock-basic-")
	if err != nil {
		log.Fatal(err)
	}
	defer closeDB()

	locker, err := recordlock.New(db)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	contend(locker)
	stall(locker, db)
}

// contend runs two goroutines that each lock the same record, one after the other.
func contend(locker *recordlock.Locker) {
	fmt.Println("== two goroutines contend for user:1")
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex // orders the printed lines with the lock events they describe
	first, err := locker.Lock(ctx, []byte("user:1"), recordlock.Options{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("A holds user:1")
	wg.Add(1)
	go func() {
		defer wg.Done()
		h, err := locker.Lock(ctx, []byte("user:1"), recordlock.Options{Timeout: 5 * time.Second})
		if err != nil {
			log.Fatal(err)
		}
		mu.Lock()
		fmt.Println("B acquires user:1 once A has released it")
		mu.Unlock()
		h.Release()
	}()
	time.Sleep(50 * time.Millisecond) // let B queue behind A
	_, err = locker.TryLock([]byte("user:1"), recordlock.Options{})
	fmt.Printf("a TryLock meanwhile fails at once: %v\n", err)
	mu.Lock()
	fmt.Printf("A releases: %v\n", first.Release())
	mu.Unlock()
	wg.Wait()
}

// stall shows a holder that stops responding: its lease lapses, the waiter takes over, and the
// stalled holder's write is fenced off when it finally tries to commit.
func stall(locker *recordlock.Locker, db *grocksdb.DB) {
	fmt.Println("== a stalled holder loses account:7 to a waiter")
	ctx := context.Background()
	lease := 200 * time.Millisecond
	stalled, err := locker.Lock(ctx, []byte("account:7"), recordlock.Options{Lease: lease})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("S holds account:7 with a %v lease, then stalls\n", lease)

	start := time.Now()
	waiter, err := locker.Lock(ctx, []byte("account:7"), recordlock.Options{Timeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("W acquires account:7 after about %v, when S's lease lapses\n", time.Since(start).Round(100*time.Millisecond))
	select {
	case <-stalled.Done():
		fmt.Println("S's Done channel is closed")
	default:
		fmt.Println("S's Done channel is still open (unexpected)")
	}
	fmt.Printf("S: IsExpired=%v IsLeaseExpired=%v Release=%v\n", stalled.IsExpired(), stalled.IsLeaseExpired(), stalled.Release())

	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	err = waiter.Fence(func() error { return db.Put(wo, []byte("account:7"), []byte("written by W")) })
	fmt.Printf("W's fenced write: err=%v\n", err)
	err = stalled.Fence(func() error { return db.Put(wo, []byte("account:7"), []byte("written by S")) })
	fmt.Printf("S wakes up and tries a fenced write: %v\n", err)

	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	v, err := db.GetBytes(ro, []byte("account:7"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("account:7 = %q\n", v)
	waiter.Release()
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
