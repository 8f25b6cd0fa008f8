package recordlock

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/linxGnu/grocksdb"
)

// Scan calls fn for each key of r in the default column family, in ascending bytewise order, with
// its value: this Txn's staged writes merged over the database's latest values (no snapshot, as in
// Get). A key whose latest staged write is a Put is seen with that value whether or not the
// database has it; one whose latest staged write is a Delete is not seen; a write undone by
// RollbackToSavePoint is not seen. The staged writes are those of the moment Scan begins: writes
// fn stages are not seen by the rest of the scan.
//
// The slices passed to fn are valid only until fn returns, and fn must not modify them. A non-nil
// error from fn stops the scan and Scan returns it as is.
//
// A key of r that this Txn holds by a lock whose lease has ended (lapsed or revoked), or a range
// lock of the Txn that shares a key with r and whose lease has ended, makes Scan fail with
// ErrLeaseExpired before fn is called, whether or not the database has the key, as a Get of that
// key would: what the scan would read there is no longer protected. Keys of r the Txn does
// not hold are read unprotected; a lease that ends while the scan runs is caught by Commit.
//
// Scan fails with ErrTxnDone once the Txn ended and ErrClosed once the Locker is closed (also when
// fn ends the Txn or the Locker closes while the scan runs), with an error matching ErrInvalidKey,
// before anything is read, when r is invalid, and with the RocksDB error, wrapped, when the read
// fails.
func (t *Txn) Scan(r Range, fn func(key, value []byte) error) error { return t.scan(nil, r, fn) }

// ScanCF is Scan of r in column family cf (nil: the default column family). A cf that cannot be a
// family of the Locker's database fails with an error matching ErrInvalidOptions.
func (t *Txn) ScanCF(cf *grocksdb.ColumnFamilyHandle, r Range, fn func(key, value []byte) error) error {
	return t.scan(cf, r, fn)
}

func (t *Txn) scan(cf *grocksdb.ColumnFamilyHandle, r Range, fn func(key, value []byte) error) error {
	if err := t.usable(); err != nil {
		return err
	}
	if err := r.check(); err != nil {
		return err
	}
	cfID, err := t.l.columnFamily(cf)
	if err != nil {
		return err
	}
	if err := t.scanLeases(cfID, r); err != nil {
		return err
	}
	if err := t.rangeLeaseEnded(cfID, r); err != nil {
		return err
	}
	// Copies of the bounds: fn may reuse the caller's slices, and RocksDB keeps End while the
	// iterator lives.
	r = Range{Start: bytes.Clone(r.Start), End: bytes.Clone(r.End)}
	staged := t.stagedIn(cfID, r)
	// While fn runs, a RollbackToSavePoint must not hand the spare bytes of the writes it drops to
	// new writes: staged may still refer to them.
	t.scans++
	defer func() { t.scans-- }()

	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	if r.End != nil {
		ro.SetIterateUpperBound(r.End)
	}
	var it *grocksdb.Iterator
	if cf == nil {
		it = t.l.db.NewIterator(ro)
	} else {
		it = t.l.db.NewIteratorCF(ro, cf)
	}
	defer it.Close()
	if len(r.Start) == 0 {
		it.SeekToFirst()
	} else {
		it.Seek(r.Start)
	}
	for {
		var key []byte
		more := it.Valid()
		if more {
			key = it.Key().Data() // memory of the iterator's: no Free needed, none allowed
			more = r.below(key)
		} else if err := it.Err(); err != nil {
			// Before the staged writes left: without the database's keys between them, they are
			// not the range.
			return fmt.Errorf("recordlock: scan: %w", err)
		}
		if !more && len(staged) == 0 {
			break
		}
		var err error
		switch c := compareNext(more, key, staged); {
		case c < 0: // the database's key comes first
			err = fn(key, it.Value().Data())
			it.Next()
		default: // a staged write comes first, or replaces the database's value of its key
			w := staged[0]
			staged = staged[1:]
			if !w.del {
				err = fn(w.entryKey(), w.value())
			}
			if c == 0 {
				it.Next()
			}
		}
		if err != nil {
			return err
		}
		if err := t.usable(); err != nil {
			return err
		}
	}
	return nil
}

// compareNext compares the database's next key of the range (key, if there is one: more) with the
// first of staged: below zero when the database's comes first, zero when both are the same key,
// above zero when the staged write's comes first. One of them is there.
func compareNext(more bool, key []byte, staged []stagedWrite) int {
	switch {
	case len(staged) == 0:
		return -1
	case !more:
		return 1
	}
	return bytes.Compare(key, staged[0].entryKey())
}

// stagedIn returns the latest staged write of each key of r in column family cf, sorted by key.
func (t *Txn) stagedIn(cf uint32, r Range) []stagedWrite {
	var in []stagedWrite
	for i, w := range t.writes.items {
		if w.cfID == cf && r.contains(w.entryKey()) && t.writes.find(cf, w.entryKey()) == i {
			in = append(in, w)
		}
	}
	slices.SortFunc(in, func(a, b stagedWrite) int { return bytes.Compare(a.entryKey(), b.entryKey()) })
	return in
}

// scanLeases returns ErrLeaseExpired, naming the key, when the Txn still holds a key of r in
// column family cf by a lock whose lease has ended: the check Get makes for one key.
func (t *Txn) scanLeases(cf uint32, r Range) error {
	for i, x := range t.locks.items {
		h := x.h
		if h.cf() != cf || !r.contains(h.key()) || t.locks.find(cf, h.key()) != i {
			continue // not a key of r, or not the Txn's latest handle of it
		}
		if !h.released() && h.IsLeaseExpired() {
			return fmt.Errorf("%w: %q, a key of the range this transaction holds", ErrLeaseExpired, h.key())
		}
	}
	return nil
}
