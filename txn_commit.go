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
// commit at the same time share one RocksDB write (docs/DESIGN.md §5.4): each waits for it inside
// its fences, and a failed write fails each of them. After the Locker's Close it
// writes nothing and returns ErrClosed; on a Txn that already ended it returns ErrTxnDone; a
// failed RocksDB write is returned wrapped. Whatever it returns, the Txn has ended.
func (t *Txn) Commit() error {
	if err := t.usable(); err != nil {
		if errors.Is(err, ErrClosed) {
			t.end()
		}
		return err
	}
	defer t.end()
	var buf [4]*Handle
	// No separate lease check first: each Fence refuses with ErrLeaseExpired before anything
	// inside it runs, and the write is innermost, so one ended lease writes nothing.
	return fenced(t.checked(buf[:0]), t.fencedWrite)
}

// fencedWrite is what Commit runs inside the fences: the write of the staged writes.
func (t *Txn) fencedWrite() error {
	// Checked inside the fences: Close releases these handles only after the write returns.
	if t.l.ten.Closed() {
		return ErrClosed
	}
	if hook := t.l.hooks.inFence; hook != nil {
		hook()
	}
	if len(t.writes.items) == 0 {
		return nil
	}
	if err := t.l.commits.write(t); err != nil {
		return fmt.Errorf("recordlock: commit: %w", err)
	}
	return nil
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
	return hs[0].Fence(func() error { return fenced(hs[1:], write) })
}

// checked appends to hs the handles Commit checks, each once: the handle protecting each staged
// write, and the latest handle of each record that no Release returning true gave back (the locks
// the Txn still holds). They are sorted by record (column family ID, then key) so that fences
// nest in a deterministic order; handles of one record keep the order they were taken in.
func (t *Txn) checked(hs []*Handle) []*Handle {
	for i, x := range t.locks.items {
		if x.protects || (!x.h.released() && t.locks.find(x.entryCF(), x.entryKey()) == i) {
			hs = append(hs, x.h)
		}
	}
	slices.SortStableFunc(hs, func(a, b *Handle) int {
		return cmp.Or(cmp.Compare(a.hold.CF(), b.hold.CF()), bytes.Compare(a.key(), b.key()))
	})
	return hs
}
