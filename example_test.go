package recordlock_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock"
)

// exampleDB opens a throwaway RocksDB in a new temporary directory; the returned func closes it
// and removes the directory.
func exampleDB() (*grocksdb.DB, func()) {
	dir, err := os.MkdirTemp("", "recordlock-example-")
	if err != nil {
		panic(err)
	}
	opts := grocksdb.NewDefaultOptions()
	defer opts.Destroy()
	opts.SetCreateIfMissing(true)
	db, err := grocksdb.OpenDb(opts, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		panic(err)
	}
	return db, func() {
		db.Close()
		_ = os.RemoveAll(dir)
	}
}

func ExampleLocker_Lock() {
	db, cleanup := exampleDB()
	defer cleanup()
	locker, err := recordlock.New(db)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	h, err := locker.Lock(context.Background(), []byte("account/42"), recordlock.Options{Lease: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	fmt.Printf("locked %s\n", h.Key())
	fmt.Println("may write:", !h.IsExpired())
	fmt.Println("released:", h.Release())
	fmt.Println("released again:", h.Release())
	fmt.Println("may write:", !h.IsExpired())
	// Output:
	// locked account/42
	// may write: true
	// released: true
	// released again: false
	// may write: false
}

func ExampleLocker_TryLock() {
	db, cleanup := exampleDB()
	defer cleanup()
	locker, err := recordlock.New(db)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	key := []byte("account/42")
	first, err := locker.TryLock(key, recordlock.Options{})
	if err != nil {
		panic(err)
	}
	_, err = locker.TryLock(key, recordlock.Options{})
	fmt.Println("busy:", errors.Is(err, recordlock.ErrLocked))
	first.Release()
	second, err := locker.TryLock(key, recordlock.Options{})
	fmt.Println("after release:", err)
	second.Release()
	// Output:
	// busy: true
	// after release: <nil>
}

// A holder that stalls loses its key when its lease lapses, whatever it does or does not call.
// A ManualClock makes the lapse deterministic.
func ExampleManualClock() {
	db, cleanup := exampleDB()
	defer cleanup()
	clock := recordlock.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	locker, err := recordlock.New(db, recordlock.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	key := []byte("account/42")
	stalled, err := locker.TryLock(key, recordlock.Options{Lease: time.Second})
	if err != nil {
		panic(err)
	}
	fmt.Println("lease ends at", stalled.ExpiresAt().Format(time.TimeOnly))

	clock.StepWall(time.Hour) // wall-clock steps do not move the lease
	clock.Advance(999 * time.Millisecond)
	fmt.Println("expired after 999ms:", stalled.IsExpired())
	clock.Advance(time.Millisecond)
	<-stalled.Done()
	fmt.Println("expired after 1s:", stalled.IsExpired())

	next, err := locker.TryLock(key, recordlock.Options{})
	fmt.Println("taken over:", err == nil)
	fmt.Println("stalled holder's release:", stalled.Release())
	next.Release()
	// Output:
	// lease ends at 00:00:01
	// expired after 999ms: false
	// expired after 1s: true
	// taken over: true
	// stalled holder's release: false
}

// Fence makes a write land only while the lease is live, and keeps the key from passing on
// until the write returns.
func ExampleHandle_Fence() {
	db, cleanup := exampleDB()
	defer cleanup()
	clock := recordlock.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	locker, err := recordlock.New(db, recordlock.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()

	key := []byte("account/42")
	h, err := locker.TryLock(key, recordlock.Options{Lease: time.Second})
	if err != nil {
		panic(err)
	}
	put := func(value string) func() error {
		return func() error { return db.Put(wo, key, []byte(value)) }
	}
	fmt.Println("first write:", h.Fence(put("100")))
	clock.Advance(time.Second) // the lease lapses before the second write
	err = h.Fence(put("200"))
	fmt.Println("second write:", err, errors.Is(err, recordlock.ErrLeaseExpired))

	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	v, err := db.Get(ro, key)
	if err != nil {
		panic(err)
	}
	defer v.Free()
	fmt.Printf("stored: %s\n", v.Data())
	// Output:
	// first write: <nil>
	// second write: recordlock: lease expired true
	// stored: 100
}

// A read-modify-write under a record lock: the increment lands only while the lock's lease is
// live, so a holder that stalls past its lease can never overwrite its successor's work.
func ExampleTxn() {
	db, cleanup := exampleDB()
	defer cleanup()
	locker, err := recordlock.New(db)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	increment := func(ctx context.Context, key []byte) error {
		txn := locker.Begin()
		defer txn.Rollback() // releases the lock; a no-op after Commit
		if _, err := txn.Lock(ctx, key, recordlock.Options{Lease: 5 * time.Second}); err != nil {
			return err
		}
		v, err := txn.Get(key) // nil while the key does not exist
		if err != nil {
			return err
		}
		n := 0
		if v != nil {
			if n, err = strconv.Atoi(string(v)); err != nil {
				return err
			}
		}
		if err := txn.Put(key, []byte(strconv.Itoa(n+1))); err != nil {
			return err
		}
		return txn.Commit() // ErrLeaseExpired: nothing was written; read again and retry
	}

	for range 3 {
		if err := increment(context.Background(), []byte("visits")); err != nil {
			panic(err)
		}
	}
	txn := locker.Begin()
	defer txn.Rollback()
	v, err := txn.Get([]byte("visits"))
	if err != nil {
		panic(err)
	}
	fmt.Printf("visits: %s\n", v)
	// Output: visits: 3
}

// A transfer locks both accounts with LockAll, which takes them in key order whatever order they
// are given in, so two transfers between the same accounts in opposite directions never wait for
// each other in a cycle. The handles come back in the order given.
func ExampleTxn_LockAll() {
	db, cleanup := exampleDB()
	defer cleanup()
	locker, err := recordlock.New(db)
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()

	seed := locker.Begin()
	if _, err := seed.LockAll(ctx, recordlock.Options{}, []byte("account/alice"), []byte("account/bob")); err != nil {
		panic(err)
	}
	if err := seed.Put([]byte("account/alice"), []byte("100")); err != nil {
		panic(err)
	}
	if err := seed.Put([]byte("account/bob"), []byte("50")); err != nil {
		panic(err)
	}
	if err := seed.Commit(); err != nil {
		panic(err)
	}

	// bob pays alice 30: bob's account is given first, alice's is locked first.
	txn, err := locker.BeginTx(recordlock.TxnOptions{Name: "bob pays alice", Sync: true})
	if err != nil {
		panic(err)
	}
	defer txn.Rollback()
	from, to := []byte("account/bob"), []byte("account/alice")
	hs, err := txn.LockAll(ctx, recordlock.Options{Timeout: time.Second}, from, to)
	if err != nil {
		panic(err) // ErrTimeout, ErrDeadlock or a ctx error: nothing this call took stays locked
	}
	fmt.Printf("handles: %s, %s\n", hs[0].Key(), hs[1].Key())
	balance := func(key []byte) int {
		v, err := txn.Get(key)
		if err != nil {
			panic(err)
		}
		var n int
		if _, err := fmt.Sscan(string(v), &n); err != nil {
			panic(err)
		}
		return n
	}
	if err := txn.Put(from, fmt.Append(nil, balance(from)-30)); err != nil {
		panic(err)
	}
	if err := txn.Put(to, fmt.Append(nil, balance(to)+30)); err != nil {
		panic(err)
	}
	err = txn.Put([]byte("account/carol"), []byte("1"))
	fmt.Println("unlocked write:", errors.Is(err, recordlock.ErrNotLocked))
	fmt.Println("commit:", txn.Commit())

	check := locker.Begin()
	defer check.Rollback()
	for _, k := range []string{"account/alice", "account/bob", "account/carol"} {
		v, _ := check.Get([]byte(k))
		fmt.Printf("%s = %q\n", k, v)
	}
	// Output:
	// handles: account/bob, account/alice
	// unlocked write: true
	// commit: <nil>
	// account/alice = "130"
	// account/bob = "20"
	// account/carol = ""
}

// oneProcessCoordinator is the smallest Coordinator that keeps the contract: it admits every
// request at once (a real one asks the cluster, honouring ctx) and grants each key's rounds
// increasing tokens. It is safe for concurrent use, as the Locker needs.
type oneProcessCoordinator struct {
	clock    recordlock.Clock            // the Locker's clock: MintedMono is read from it
	stamp    func() recordlock.Timestamp // the Locker's Timestamp method
	maxLease time.Duration               // the longest lease it can grant

	mu     sync.Mutex
	tokens map[record]uint64
	recall map[record]func() // each record's revoke, while admitted
}

// record is a lock's identity across a cluster.
type record struct{ cf, key string }

func (c *oneProcessCoordinator) Acquire(ctx context.Context, req recordlock.Request) (recordlock.Round, error) {
	if req.Lease > c.maxLease {
		// A lease it can never grant: the Lock fails with an error matching this one.
		return recordlock.Round{}, fmt.Errorf("%w: this coordinator grants at most %v", recordlock.ErrInvalidOptions, c.maxLease)
	}
	// Read before the request goes out: the round's lease is measured from this instant, so this
	// node's deadline never falls after the cluster's.
	minted := c.clock.Mono()
	if err := ctx.Err(); err != nil {
		return recordlock.Round{}, err
	}
	// A record is (column family name, key); the Locker may reuse req.Key once Acquire returns.
	// This coordinator admits one node, so it needs no mode: the Locker orders its own holders.
	k := record{req.ColumnFamily, string(req.Key)}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tokens[k]++
	token := c.tokens[k]
	c.recall[k] = req.Revoke
	release := func() error { // becomes the handle's release hook
		c.mu.Lock()
		delete(c.recall, k)
		c.mu.Unlock()
		fmt.Printf("coordinator: round %d of %s given back\n", token, k.key)
		return nil
	}
	return recordlock.Round{TsR: c.stamp(), MintedMono: minted, Token: token, Release: release}, nil
}

// revokeAdmission recalls key's admission early, as when another node asks for the key.
func (c *oneProcessCoordinator) revokeAdmission(key string) {
	c.mu.Lock()
	revoke := c.recall[record{"default", key}]
	c.mu.Unlock()
	if revoke != nil {
		revoke() // ends in Handle.RevokeLease, which runs the release hook
	}
}

// A Coordinator grants the cluster-wide half of a lock. The Locker takes the local key, asks
// Acquire for a round with the Options' resolved lease, and joins it.
func ExampleCoordinator() {
	db, cleanup := exampleDB()
	defer cleanup()
	clock := recordlock.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	coord := &oneProcessCoordinator{clock: clock, maxLease: time.Minute,
		tokens: map[record]uint64{}, recall: map[record]func(){}}
	locker, err := recordlock.New(db, recordlock.WithClock(clock), recordlock.WithCoordinator(coord))
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	coord.stamp = locker.Timestamp
	ctx := context.Background()
	key := []byte("order/7")

	// What a Lock with these Options asks of the coordinator.
	opts := recordlock.Options{Lease: 10 * time.Second}
	r, err := opts.Resolve()
	if err != nil {
		panic(err)
	}
	fmt.Println("resolved:", r.Scope, r.Lease, "scope named:", r.ScopeRequested)

	h, err := locker.Lock(ctx, key, opts)
	if err != nil {
		panic(err)
	}
	tsR, joined := h.ClusterTsR()
	fmt.Println("handle:", h.Scope(), "token", h.Token(), "AcquiredAt is TsR:", joined && h.AcquiredAt() == tsR)
	fmt.Println("released:", h.Release())

	h, err = locker.Lock(ctx, key, opts)
	if err != nil {
		panic(err)
	}
	coord.revokeAdmission(string(key))
	fmt.Println("after a recall, lease ended:", h.IsLeaseExpired())

	_, err = locker.Lock(ctx, key, recordlock.Options{Lease: 2 * time.Minute})
	fmt.Println("too long a lease:", errors.Is(err, recordlock.ErrClusterUnavailable), errors.Is(err, recordlock.ErrInvalidOptions))

	n, err := locker.Lock(ctx, key, recordlock.Options{Scope: recordlock.ScopeNode})
	if err != nil {
		panic(err)
	}
	fmt.Println("node scope:", n.Scope(), "token", n.Token())
	n.Release()
	// Output:
	// resolved: cluster 10s scope named: false
	// handle: cluster token 1 AcquiredAt is TsR: true
	// coordinator: round 1 of order/7 given back
	// released: true
	// coordinator: round 2 of order/7 given back
	// after a recall, lease ended: true
	// too long a lease: true true
	// node scope: node token 0
}

// A database that stamps each record with a version (for replication or optimistic reads) can
// take it from the lock, so that the versions of one record increase from holder to holder. Here
// the stored value is the 8-byte version followed by the data.
func ExampleHandle_NextHolderVersion() {
	db, cleanup := exampleDB()
	defer cleanup()
	clock := recordlock.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	locker, err := recordlock.New(db, recordlock.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ro, wo := grocksdb.NewDefaultReadOptions(), grocksdb.NewDefaultWriteOptions()
	defer ro.Destroy()
	defer wo.Destroy()
	ctx := context.Background()
	key := []byte("order/7")
	save := func(h *recordlock.Handle, v recordlock.Timestamp, data string) {
		value := append(binary.BigEndian.AppendUint64(nil, uint64(v)), data...)
		if err := h.Fence(func() error { return db.Put(wo, key, value) }); err != nil {
			panic(err)
		}
	}
	stored := func() recordlock.Timestamp {
		v, err := db.GetBytes(ro, key)
		if err != nil {
			panic(err)
		}
		return recordlock.Timestamp(binary.BigEndian.Uint64(v))
	}

	a, err := locker.Lock(ctx, key, recordlock.Options{})
	if err != nil {
		panic(err)
	}
	base := a.AcquiredAt() // versions below are printed relative to it
	save(a, a.NextHolderVersion(), "placed")
	save(a, a.NextHolderVersion(), "paid")
	// HolderVersionCandidate looks ahead without recording: use it for a write that may still
	// fail, and NoteHolderVersion once it went in.
	fmt.Println("first holder:", stored()-base, "next candidate:", a.HolderVersionCandidate(0)-base, a.HolderVersionCandidate(0)-base)
	a.Release()

	// The next holder's AcquiredAt is minted later, yet need not be above every version the first
	// holder issued: it notes the stored version as the floor of its own.
	b, err := locker.Lock(ctx, key, recordlock.Options{})
	if err != nil {
		panic(err)
	}
	fmt.Println("next holder's AcquiredAt:", b.AcquiredAt()-base)
	b.NoteCandidateFloor(stored() + 1)
	v := b.HolderVersionCandidate(0)
	save(b, v, "shipped")
	b.NoteHolderVersion(v)
	fmt.Println("next holder:", stored()-base, "then:", b.NextHolderVersion()-base)
	b.Release()
	// Output:
	// first holder: 1 next candidate: 2 2
	// next holder's AcquiredAt: 1
	// next holder: 2 then: 3
}
