package recordlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// The phantom stress test: counters hold a shared range over a prefix, count its keys with a Scan
// and commit the count, while mutators insert and delete keys inside and around the prefix, each
// under key locks. Its oracle replays RocksDB's write-ahead log in commit order, the order the
// writes landed, and checks the invariant of docs/DESIGN.md's range locks: every committed count
// equals the number of keys the prefix held at the instant its commit landed.

// phantomPrefix is the prefix the counters lock and count.
var phantomPrefix = []byte("p/")

// phantomDomain is every key the mutators insert and delete: 24 inside the prefix and the
// nearest keys outside it on either side, so that a range that reached past its bounds, or fell
// short of them, would show.
var phantomDomain = func() [][]byte {
	var keys [][]byte
	for i := range 24 {
		keys = append(keys, fmt.Appendf(nil, "p/%02d", i))
	}
	// "p" and "p.x" sort before "p/", "p0" and "p0/1" at or after Prefix("p/").End, "p0".
	return append(keys, []byte("p"), []byte("p.x"), []byte("p0"), []byte("p0/1"), []byte("q/1"))
}()

// phantomWorkload sizes one run: counters Txns each commit counts counts, while mutators Txns
// insert or delete one or two keys of phantomDomain per Txn until the counters are done. A Txn
// that fails with ErrDeadlock rolls back and tries again: a mutator that holds a key of the prefix
// and waits for a second one, queued behind a counter's range request that waits for the first,
// closes a cycle (docs/DESIGN.md §17).
type phantomWorkload struct {
	counters, counts, mutators int
}

// phantomRun is what one run of the workload committed, as its goroutines counted it (counts,
// and writes of keys of phantomDomain), and the deadlocks its Txns retried.
type phantomRun struct {
	counts, mutations, deadlocks int64
}

// runPhantomWorkload runs w on a fresh database with a Locker made with opts, and returns the
// database for the oracle and what was committed. Half of phantomDomain is written first, in one
// batch, so the log holds the whole history of every key.
func runPhantomWorkload(t *testing.T, w phantomWorkload, opts ...recordlock.Option) (*grocksdb.DB, phantomRun) {
	t.Helper()
	db := openDB(t)
	l := newLocker(t, db, opts...)
	seed := grocksdb.NewWriteBatch()
	defer seed.Destroy()
	for i, k := range phantomDomain {
		if i%2 == 0 {
			seed.Put(k, []byte("v"))
		}
	}
	wo := grocksdb.NewDefaultWriteOptions()
	defer wo.Destroy()
	require.NoError(t, db.Write(wo, seed))

	var counts, mutations, deadlocks atomic.Int64
	retry := func(txn func() error) error {
		for {
			err := txn()
			if !errors.Is(err, recordlock.ErrDeadlock) {
				return err
			}
			deadlocks.Add(1)
		}
	}
	var countersLeft atomic.Int32
	countersLeft.Store(int32(w.counters))
	errs := make(chan error, w.counters+w.mutators)
	var wg sync.WaitGroup
	for c := range w.counters {
		wg.Go(func() {
			defer countersLeft.Add(-1)
			for n := range w.counts {
				key := fmt.Appendf(nil, "count/%d/%04d", c, n)
				if err := retry(func() error { return countPrefix(l, key) }); err != nil {
					errs <- fmt.Errorf("counter %d, count %d: %w", c, n, err)
					return
				}
				counts.Add(1)
			}
		})
	}
	for m := range w.mutators {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(m), 29))
			for countersLeft.Load() > 0 {
				writes := 0
				if err := retry(func() (err error) { writes, err = mutate(l, r); return err }); err != nil {
					errs <- fmt.Errorf("mutator %d: %w", m, err)
					return
				}
				mutations.Add(int64(writes))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return db, phantomRun{counts: counts.Load(), mutations: mutations.Load(), deadlocks: deadlocks.Load()}
}

// countPrefix is one counter's Txn: a shared lock on the prefix, a Scan that counts its keys, a
// moment's work during which other goroutines run, and the count committed under key.
func countPrefix(l *recordlock.Locker, key []byte) error {
	ctx := context.Background()
	txn := l.Begin()
	defer txn.Rollback()
	r := recordlock.Prefix(phantomPrefix)
	if _, err := txn.LockRange(ctx, r, recordlock.Options{Shared: true, Timeout: time.Minute}); err != nil {
		return err
	}
	n := 0
	if err := txn.Scan(r, func(_, _ []byte) error { n++; return nil }); err != nil {
		return err
	}
	for range 4 {
		runtime.Gosched() // leave the processor to the mutators between the scan and the commit
	}
	if _, err := txn.Lock(ctx, key, wait); err != nil {
		return err
	}
	if err := txn.Put(key, strconv.AppendInt(nil, int64(n), 10)); err != nil {
		return err
	}
	return txn.Commit()
}

// mutate is one mutator's Txn: it locks one or two keys of phantomDomain (in order, with
// LockAll) and flips each, inserting it when it is missing and deleting it when it is there. It
// returns the number of writes it committed.
func mutate(l *recordlock.Locker, r *rand.Rand) (int, error) {
	ctx := context.Background()
	keys := [][]byte{phantomDomain[r.IntN(len(phantomDomain))]}
	if r.IntN(2) == 0 {
		if k := phantomDomain[r.IntN(len(phantomDomain))]; !bytes.Equal(k, keys[0]) {
			keys = append(keys, k)
		}
	}
	txn := l.Begin()
	defer txn.Rollback()
	if _, err := txn.LockAll(ctx, wait, keys...); err != nil {
		return 0, err
	}
	for _, k := range keys {
		v, err := txn.Get(k)
		if err != nil {
			return 0, err
		}
		if v == nil {
			err = txn.Put(k, []byte("v"))
		} else {
			err = txn.Delete(k)
		}
		if err != nil {
			return 0, err
		}
	}
	return len(keys), txn.Commit()
}

// phantomError is a count the oracle found wrong: the broken invariant, with where it broke.
type phantomError struct {
	countKey  string
	committed int    // the count the Txn committed
	present   int    // the keys of the prefix when its commit landed
	seq       uint64 // the sequence number of the count's batch
}

func (e *phantomError) Error() string {
	return fmt.Sprintf("phantom: count %s committed %d keys of prefix %q, but the prefix held %d keys when that commit landed (sequence number %d)",
		e.countKey, e.committed, phantomPrefix, e.present, e.seq)
}

// phantomReplay is what the oracle saw in the log.
type phantomReplay struct {
	counts    int64 // count records
	mutations int64 // writes of keys of phantomDomain, after the seed
}

// replayPhantoms replays db's write-ahead log from its first write, record by record in the order
// they landed, keeping the set of keys of the prefix that exist. It checks each count record
// against that set as it stands at the count's sequence number, and returns a *phantomError for
// the first count that disagrees. RocksDB may log the batches of concurrent writes as one merged
// batch; its records keep their order and take one sequence number each.
func replayPhantoms(db *grocksdb.DB) (phantomReplay, error) {
	var rep phantomReplay
	it, err := db.GetUpdatesSince(0)
	if err != nil {
		return rep, err
	}
	defer it.Destroy()
	present := map[string]bool{}
	for seed := true; it.Valid(); it.Next() {
		batch, seq := it.GetBatch()
		n := rep.mutations
		err := replayPhantomBatch(batch, seq, present, &rep)
		batch.Destroy()
		if err != nil {
			return rep, err
		}
		if seed { // the first batch is the seed, written before the workload
			rep.mutations, seed = n, false
		}
	}
	return rep, it.Err()
}

func replayPhantomBatch(batch *grocksdb.WriteBatch, seq uint64, present map[string]bool, rep *phantomReplay) error {
	records := batch.NewIterator()
	for ; records.Next(); seq++ {
		rec := records.Record()
		k := string(rec.Key)
		switch {
		case rec.Type == grocksdb.WriteBatchValueRecord && bytes.HasPrefix(rec.Key, []byte("count/")):
			n, err := strconv.Atoi(string(rec.Value))
			if err != nil {
				return fmt.Errorf("count %s at sequence number %d: %w", k, seq, err)
			}
			rep.counts++
			inPrefix := 0
			for k := range present {
				if bytes.HasPrefix([]byte(k), phantomPrefix) {
					inPrefix++
				}
			}
			if n != inPrefix {
				return &phantomError{countKey: k, committed: n, present: inPrefix, seq: seq}
			}
		case !slices.ContainsFunc(phantomDomain, func(d []byte) bool { return string(d) == k }):
			return fmt.Errorf("sequence number %d writes %q, a key no Txn of the workload writes", seq, k)
		case rec.Type == grocksdb.WriteBatchValueRecord:
			present[k] = true
			rep.mutations++
		case rec.Type == grocksdb.WriteBatchDeletionRecord:
			delete(present, k)
			rep.mutations++
		default:
			return fmt.Errorf("sequence number %d holds a record of type %d for %q, which the workload never writes", seq, rec.Type, k)
		}
	}
	return records.Error()
}
