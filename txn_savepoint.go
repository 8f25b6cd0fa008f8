package recordlock

// Savepoints: marks in a Txn's staged writes that RollbackToSavePoint returns to. Locks are not
// part of a savepoint: a lock taken after a mark stays taken when the Txn rolls back to it, as in
// RocksDB's transactions.

// savePoints are a Txn's marks, in its txnRare.
type savePoints struct {
	marks []savePoint
	// protected lists, in order, the positions in Txn.locks of the locks that a write staged
	// since the oldest mark was the first to mark as protecting: rolling back to a mark clears
	// the flag of those listed after it, so a lock protects only writes that are still staged.
	protected []int
	// rangeProtected is protected for the positions in Txn.ranges.items.
	rangeProtected []int
}

// savePoint is how far the Txn had got when SetSavePoint was called.
type savePoint struct {
	writes    int   // len(Txn.writes.items)
	spareN    uint8 // Txn.spareN: the spare bytes the writes before the mark use
	protected int   // len(savePoints.protected)
	ranges    int   // len(savePoints.rangeProtected)
}

// SetSavePoint marks the writes staged so far, so that RollbackToSavePoint can discard the ones
// staged after it. Marks nest: each RollbackToSavePoint returns to the most recent one and removes
// it. On a Txn that has ended, or whose Locker is closed, it does nothing.
func (t *Txn) SetSavePoint() {
	if t.usable() != nil {
		return
	}
	sp := &t.rareParts().sp
	sp.marks = append(sp.marks, savePoint{writes: len(t.writes.items), spareN: t.spareN,
		protected: len(sp.protected), ranges: len(sp.rangeProtected)})
}

// RollbackToSavePoint discards the writes staged since the most recent SetSavePoint and removes
// that mark. The Txn's locks are kept, including those taken since the mark. It returns
// ErrNoSavePoint, changing nothing, when there is no mark; ErrTxnDone after Commit or Rollback;
// and ErrClosed once the Locker is closed.
func (t *Txn) RollbackToSavePoint() error {
	if err := t.usable(); err != nil {
		return err
	}
	if !t.hasSavePoint() {
		return ErrNoSavePoint
	}
	sp := &t.rare.sp
	m := sp.marks[len(sp.marks)-1]
	sp.marks = sp.marks[:len(sp.marks)-1]
	for _, i := range sp.protected[m.protected:] {
		t.locks.items[i].protects = false
	}
	sp.protected = sp.protected[:m.protected]
	for _, i := range sp.rangeProtected[m.ranges:] {
		t.rare.rngs.items[i].protects = false
	}
	sp.rangeProtected = sp.rangeProtected[:m.ranges]
	t.writes.truncate(m.writes)
	if t.scans == 0 { // a running Scan may still refer to the discarded writes' bytes
		t.spareN = m.spareN // the bytes of the discarded writes may be reused
	}
	return nil
}

// noteProtects records that the write being staged makes the lock at position i protect a write,
// so that rolling back to a mark set before can undo it.
func (t *Txn) noteProtects(i int) {
	x := &t.locks.items[i]
	if !x.protects && t.hasSavePoint() {
		t.rare.sp.protected = append(t.rare.sp.protected, i)
	}
	x.protects = true
}

// noteRangeProtects is noteProtects of the range lock at position i of Txn.ranges.
func (t *Txn) noteRangeProtects(i int) {
	x := &t.rare.rngs.items[i]
	if !x.protects && t.hasSavePoint() {
		t.rare.sp.rangeProtected = append(t.rare.sp.rangeProtected, i)
	}
	x.protects = true
}

// hasSavePoint reports whether the Txn has a mark.
func (t *Txn) hasSavePoint() bool { return t.rare != nil && len(t.rare.sp.marks) > 0 }
