package recordlock

import (
	"fmt"

	"github.com/linxGnu/grocksdb"
)

// stagedWrite is one Put or Delete waiting for Commit. Which handle protects it is decided when
// it is staged, by marking that handle's txnLock.
type stagedWrite struct {
	kv   []byte                       // a copy of the key, then of the value
	cf   *grocksdb.ColumnFamilyHandle // nil for the default column family
	cfID uint32
	klen uint32 // beside cfID, so that a Txn with its two inline entries fits a smaller size class
	del  bool
}

func (w stagedWrite) entryCF() uint32  { return w.cfID }
func (w stagedWrite) entryKey() []byte { return w.kv[:w.klen:w.klen] }

func (w stagedWrite) value() []byte { return w.kv[w.klen:] }

// Put stages key=value for Commit. The write is protected by this Txn's lock of key, which must
// still authorize writes, or else by a live exclusive range lock of the Txn (Txn.LockRange) that
// covers key. The caller may reuse key and value once Put returns. On failure nothing is staged,
// and the error is ErrInvalidKey for an empty key, ErrTxnDone once the Txn ended, ErrClosed once
// the Locker is closed, ErrLeaseExpired when the lease of the Txn's lock of key (or, with none,
// of a range lock covering it) has ended, ErrReleased when that lock was released, or an error
// matching ErrNotLocked when the Txn never locked key (unless TxnOptions.AllowUnlockedWrites) or
// holds it, or a range over it, only shared (a shared lock protects reads; Lock the key or range
// without Shared to upgrade it).
func (t *Txn) Put(key, value []byte) error { return t.stage(nil, key, value, false) }

// Delete stages the deletion of key for Commit, under the same rules, and with the same errors, as
// Put: ErrInvalidKey, ErrTxnDone, ErrClosed, ErrLeaseExpired, ErrReleased or ErrNotLocked.
func (t *Txn) Delete(key []byte) error { return t.stage(nil, key, nil, true) }

// PutCF is Put of key in column family cf (nil: the default column family). It is protected by
// the lock this Txn took on key in the same column family. A cf that cannot be a family of the
// Locker's database fails with an error matching ErrInvalidOptions, even with
// TxnOptions.AllowUnlockedWrites.
func (t *Txn) PutCF(cf *grocksdb.ColumnFamilyHandle, key, value []byte) error {
	return t.stage(cf, key, value, false)
}

// DeleteCF is Delete of key in column family cf (nil: the default column family). Like PutCF it
// refuses a cf that cannot be a family of the Locker's database with an error matching
// ErrInvalidOptions.
func (t *Txn) DeleteCF(cf *grocksdb.ColumnFamilyHandle, key []byte) error {
	return t.stage(cf, key, nil, true)
}

func (t *Txn) stage(cf *grocksdb.ColumnFamilyHandle, key, value []byte, del bool) error {
	if err := t.usable(); err != nil {
		return err
	}
	if len(key) == 0 {
		return invalidKey(key)
	}
	cfID, err := t.l.columnFamily(cf)
	if err != nil {
		return err
	}
	i := t.locks.find(cfID, key) // a write is protected by the record's latest handle, if it may
	if i < 0 || !mayWrite(t.locks.items[i].h) {
		return t.stageWithoutKeyLock(cf, cfID, key, value, del, i)
	}
	t.writes.add(stagedWrite{kv: t.copyOf(key, value), cf: cf, cfID: cfID, klen: uint32(len(key)), del: del})
	t.noteProtects(i)
	return nil
}

// mayWrite reports whether h, the Txn's lock of a key, may protect a write of it.
func mayWrite(h *Handle) bool { return !h.IsExpired() && !h.Shared() }

// stageWithoutKeyLock is stage of a write that the key's latest handle, at position i of
// Txn.locks (-1 for none), cannot protect: a live exclusive range of the Txn that covers the key
// protects it (docs/DESIGN.md §16.1); failing that, a key the Txn never locked is a plain write
// with TxnOptions.AllowUnlockedWrites, and anything else is the error of the write.
func (t *Txn) stageWithoutKeyLock(cf *grocksdb.ColumnFamilyHandle, cfID uint32, key, value []byte, del bool, i int) error {
	var err error
	if i >= 0 {
		err = writable(t.locks.items[i].h, key)
	}
	r := -1
	if rs := t.ranges(); rs != nil {
		var rangeErr error
		r, rangeErr = rs.forWrite(cfID, key)
		if i < 0 {
			err = rangeErr
		}
	}
	switch {
	case r >= 0:
	case err != nil:
		return err
	case !t.unlockedWrites:
		return fmt.Errorf("%w: %q", ErrNotLocked, key)
	}
	t.writes.add(stagedWrite{kv: t.copyOf(key, value), cf: cf, cfID: cfID, klen: uint32(len(key)), del: del})
	if r >= 0 {
		t.noteRangeProtects(r)
	}
	return nil
}

// writable returns nil when h, the Txn's lock of key, may protect a write of it, else the error
// of the write.
func writable(h *Handle, key []byte) error {
	switch {
	case h.IsExpired():
		if h.IsLeaseExpired() {
			return ErrLeaseExpired
		}
		return ErrReleased
	case h.Shared():
		return fmt.Errorf("%w: %q is held shared; lock it exclusively (Txn.Lock without Shared) to write it", ErrNotLocked, key)
	}
	return nil
}

// copyOf returns a copy of key and value back to back: in spare while it has room, else in one
// new allocation.
func (t *Txn) copyOf(key, value []byte) []byte {
	n := len(key) + len(value)
	var buf []byte
	if off := int(t.spareN); n <= len(t.spare)-off {
		buf = t.spare[off : off+n : off+n]
		t.spareN += uint8(n)
	} else {
		buf = make([]byte, n)
	}
	copy(buf[copy(buf, key):], value)
	return buf
}
