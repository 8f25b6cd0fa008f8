package recordlock

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/linxGnu/grocksdb"
)

// Commit writes the staged writes atomically, in one RocksDB write whatever column families they
// touch, with the write options of TxnOptions; then it releases the Txn's locks that were not
// taken with Hold, and ends the Txn.
//
// Commit checks every lock the Txn still holds, whether or not a write is staged under it, since
// what the Txn read under it may have changed once its lease ended: the latest handle of each
// record the Txn locked, unless a Release of that handle returned true (a Release returning false
// gave nothing back, and the lock is checked). It also checks the handle protecting each staged
// write, released or not. If the lease of any handle checked has ended (lapsed or revoked),
// Commit writes nothing, still releases the locks, and returns ErrLeaseExpired. Otherwise the
// batch is written inside the fences of every handle checked (Handle.Fence), entered in record
// order: no lease is found ended after the check, and no key passes to a successor, until the
// write has returned. With nothing staged Commit checks the same way and writes nothing, so a
// read-only Txn learns whether its reads stayed protected to the end. Txns of one Locker that
// commit at the same time may share one RocksDB write (docs/DESIGN.md §5.4), each waiting for it
// inside its fences; only batches that write nothing but the default column family are merged.
//
// The outcome is the Txn's own. nil means the whole batch landed. An error matching
// ErrCommitAmbiguous, which every failed RocksDB write is (it wraps RocksDB's error), means some
// or all of the batch may have landed, now or once the database is reopened: read before you
// retry. Any other error means nothing of the batch landed: ErrLeaseExpired as above; after the
// Locker's Close, ErrClosed (no write of a Txn lands after Close has returned, with or without
// locks); on a Txn that already ended, ErrTxnDone. Whatever it returns, the Txn has ended.
func (t *Txn) Commit() error {
	if err := t.usable(); err != nil {
		if errors.Is(err, ErrClosed) {
			t.end()
		}
		return err
	}
	defer t.end()
	var buf [4]*Handle
	hs := t.checked(buf[:0])
	if len(hs) == 0 {
		return t.unfencedWrite()
	}
	// No separate lease check first: each Fence refuses with ErrLeaseExpired before anything
	// inside it runs, and the write is innermost, so one ended lease writes nothing.
	return fenced(hs, t.fencedWrite)
}

// unfencedWrite is what Commit runs when it checks no handle (its writes are all plain writes
// of TxnOptions.AllowUnlockedWrites, or it has none). No key it holds keeps Close waiting, so it
// registers with the Locker's stray fences, which Close waits for: no write of a Txn lands after
// its Locker's Close has returned.
func (t *Txn) unfencedWrite() error {
	if !t.l.ten.EnterStray() {
		return ErrClosed
	}
	defer t.l.ten.LeaveStray()
	return t.fencedWrite()
}

// fencedWrite is what Commit runs inside the fences: the write of the staged writes.
func (t *Txn) fencedWrite() error {
	// Checked inside the fences: Close releases these handles only after the write returns.
	if t.l.ten.Closed() {
		return ErrClosed
	}
	if fp := t.l.failpoints.inFence; fp != nil {
		fp()
	}
	if len(t.writes.items) == 0 {
		return nil
	}
	return t.l.commits.write(t)
}

// errWritePanicked is what the Txns of a group write get when the write panicked in the
// goroutine of the group's leader: none can know whether RocksDB wrote the group.
var errWritePanicked = fmt.Errorf("%w: the group write panicked", ErrCommitAmbiguous)

// ambiguous wraps an error of a RocksDB write so that it matches ErrCommitAmbiguous. RocksDB's C
// API gives a failed write's status as a message only, and the same message can come from a
// write refused before its batch was logged or from one whose batch the log holds (a column
// family missing at the memtable, an I/O error on the log's sync), so no RocksDB write error
// can be read as "nothing landed".
func ambiguous(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrCommitAmbiguous, err)
}

// write writes the staged writes atomically: a single one directly, several as one WriteBatch.
func (t *Txn) write() error {
	db, wo := t.l.db, t.mode.options()
	if len(t.writes.items) == 1 {
		w := t.writes.items[0]
		switch {
		case w.cf == nil && w.del:
			return db.Delete(wo, w.entryKey())
		case w.cf == nil:
			return db.Put(wo, w.entryKey(), w.value())
		case w.del:
			return db.DeleteCF(wo, w.cf, w.entryKey())
		}
		return db.PutCF(wo, w.cf, w.entryKey(), w.value())
	}
	wb := grocksdb.NewWriteBatch()
	defer wb.Destroy()
	t.addTo(wb)
	return db.Write(wo, wb)
}

// addTo appends the staged writes to wb, in the order staged.
func (t *Txn) addTo(wb *grocksdb.WriteBatch) {
	for _, w := range t.writes.items {
		switch {
		case w.cf == nil && w.del:
			wb.Delete(w.entryKey())
		case w.cf == nil:
			wb.Put(w.entryKey(), w.value())
		case w.del:
			wb.DeleteCF(w.cf, w.entryKey())
		default:
			wb.PutCF(w.cf, w.entryKey(), w.value())
		}
	}
}

// stagedBytes is the size of the staged keys and values.
func (t *Txn) stagedBytes() int {
	n := 0
	for _, w := range t.writes.items {
		n += len(w.kv)
	}
	return n
}

// writeMode is which RocksDB write options Commit uses.
type writeMode uint8

const (
	writeDefault writeMode = iota
	writeSync              // TxnOptions.Sync
	writeNoWAL             // TxnOptions.DisableWAL
)

func (m writeMode) options() *grocksdb.WriteOptions {
	switch m {
	case writeSync:
		return syncWriteOptions()
	case writeNoWAL:
		return noWALWriteOptions()
	}
	return defaultWriteOptions()
}

// The read and write options are made once per kind and shared by every Txn of the process:
// RocksDB only reads them, and making and destroying them per transaction cost cgo calls on
// every read-modify-write. They live as long as the process.
var (
	defaultReadOptions  = sync.OnceValue(grocksdb.NewDefaultReadOptions)
	defaultWriteOptions = sync.OnceValue(grocksdb.NewDefaultWriteOptions)
	syncWriteOptions    = sync.OnceValue(func() *grocksdb.WriteOptions {
		wo := grocksdb.NewDefaultWriteOptions()
		wo.SetSync(true)
		return wo
	})
	noWALWriteOptions = sync.OnceValue(func() *grocksdb.WriteOptions {
		wo := grocksdb.NewDefaultWriteOptions()
		wo.DisableWAL(true)
		return wo
	})
)

// fenced runs write inside the fences of hs, hs[0] outermost. One protector, the usual case,
// fences write itself rather than a closure around the rest of hs.
func fenced(hs []*Handle, write func() error) error {
	switch len(hs) {
	case 0:
		return write()
	case 1:
		// The Txn releases its locks without Hold when Commit returns anyway; doing it as the
		// fence ends saves a round trip through the shard.
		return hs[0].fenceThenRelease(write)
	}
	return hs[0].fenceTxn(func() error { return fenced(hs[1:], write) })
}

// checked appends to hs the handles Commit checks, each once: the handle protecting each staged
// write, and the latest handle of each record, and of each range, that no Release returning true
// gave back (the locks the Txn still holds). They are sorted by record (column family ID, then
// key) so that fences nest in a deterministic order; handles of one record keep the order they
// were taken in.
func (t *Txn) checked(hs []*Handle) []*Handle {
	for i, x := range t.locks.items {
		if x.protects || (!x.h.released() && t.locks.find(x.entryCF(), x.entryKey()) == i) {
			hs = append(hs, x.h)
		}
	}
	hs = t.checkedRanges(hs)
	slices.SortStableFunc(hs, func(a, b *Handle) int {
		return cmp.Or(cmp.Compare(a.cf(), b.cf()), bytes.Compare(a.key(), b.key()))
	})
	return hs
}
