package recordlock

import (
	"bytes"
	"context"
	"fmt"

	"github.com/linxGnu/grocksdb"
)

// A Txn's range locks (docs/DESIGN.md §16.1). They are kept apart from its key locks, in the order
// taken, since a range is not a record: a Txn holds a few, and "which of my ranges covers this key"
// is a scan of them. A Txn that never locked a range has none of this (Txn.ranges returns nil).

// txnRanges are the range locks of a Txn, in its txnRare.
type txnRanges struct {
	// items are every range handle the Txn took, in order; of the handles of one range (column
	// family, Start, End) the latest is current, as for a record in Txn.locks.
	items []txnLock
}

// LockRange locks r in the default column family for this Txn, as Locker.LockRange does, and
// returns its handle; the lock is the Txn's like a lock of a key (it ends with the Txn unless
// opts.Hold, Commit checks and fences it, and the wait is part of deadlock detection). A Txn's
// own locks never conflict with each other.
//
// It is re-entrant for exactly the range r: if the Txn holds r in the same column family with a
// handle that still authorizes writes, a shared request, or an exclusive one for an exclusive
// lock, returns that handle without touching the key-lock table, and an exclusive request for a
// shared lock upgrades that handle as Txn.Lock upgrades a key (it waits until no other lock
// conflicts, ahead of the requests queued; on failure the handle is still shared). With
// opts.Hold the handle is upgraded to Hold (Handle.UpgradeToHold). A range that overlaps or
// contains one the Txn holds is a lock of its own.
//
// Keys inside a range the Txn holds need no lock of their own: Txn.Lock of such a key returns the
// range's handle when its mode is at least as strong as asked (an exclusive range serves both
// modes, a shared one shared requests), upgraded to Hold when opts.Hold asks, as a re-entrant
// Lock is; Put and Delete of a key inside a live exclusive range are protected by it; under a
// shared range only, they fail with an error matching ErrNotLocked.
//
// It fails as Locker.LockRange does (ErrInvalidKey for an invalid r, an *OptionError matching
// ErrInvalidOptions for ScopeCluster or other invalid options, ErrTimeout, the ctx error,
// ErrClosed), with ErrTxnDone once the Txn ended, and at once with an error matching ErrDeadlock
// if waiting would close a cycle of Txns waiting for each other. An upgrade or a Hold of a range
// whose lock ended meanwhile fails with ErrLeaseExpired or ErrReleased. On failure nothing new is
// locked and the Txn keeps its other locks, unchanged.
func (t *Txn) LockRange(ctx context.Context, r Range, opts Options) (*Handle, error) {
	return t.lockRange(ctx, 0, r, opts)
}

// LockRangeCF is LockRange of r in column family cf (nil: the default column family). A cf that
// cannot be a family of the Locker's database fails with an error matching ErrInvalidOptions.
func (t *Txn) LockRangeCF(ctx context.Context, cf *grocksdb.ColumnFamilyHandle, r Range, opts Options) (*Handle, error) {
	id, err := t.l.columnFamily(cf)
	if err != nil {
		return nil, err
	}
	return t.lockRange(ctx, id, r, opts)
}

func (t *Txn) lockRange(ctx context.Context, cf uint32, r Range, opts Options) (*Handle, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	opts, err := rangeOptions(opts)
	if err != nil {
		return nil, err
	}
	if ctx == nil {
		return nil, errNilContext
	}
	req := lockRequest{cf: cf, key: r.Start, rng: &r, wait: true, owner: t}
	if rs := t.ranges(); rs != nil {
		if i := rs.find(cf, r); i >= 0 {
			if h, err := t.relock(ctx, rs.items[i].h, req, opts); h != nil || err != nil {
				return h, err
			}
		}
	}
	h, err := t.l.lock(ctx, req, &opts)
	if err != nil {
		return nil, err
	}
	rare := t.rareParts()
	rare.rngs.items = append(rare.rngs.items, txnLock{h: h})
	return h, nil
}

// lockInRange is Txn.Lock of a key the Txn has no live lock of: the handle of a range of the Txn
// that covers it in a mode at least as strong as asked, after the checks and the Hold upgrade of a
// re-entrant lock, or nil and nil when there is none and the key must be locked on its own.
func (t *Txn) lockInRange(ctx context.Context, req lockRequest, opts Options) (*Handle, error) {
	h := t.ranges().serving(req.cf, req.key, opts.Shared)
	if h == nil {
		return nil, nil
	}
	return t.relock(ctx, h, req, opts)
}

// serving returns the current, live handle of a range that covers key in column family cf in a
// mode at least as strong as asked (an exclusive range serves both modes, a shared one shared
// requests), or nil: a lock of key the Txn asks for is that range's handle.
func (s *txnRanges) serving(cf uint32, key []byte, shared bool) *Handle {
	for i, x := range s.items {
		h := x.h
		if !h.hold.Covers(cf, key) || (h.Shared() && !shared) {
			continue
		}
		if !s.current(i) || h.IsExpired() {
			continue
		}
		return h
	}
	return nil
}

// find returns the position of the current handle of range r in column family cf, or -1.
func (s *txnRanges) find(cf uint32, r Range) int {
	for i := len(s.items) - 1; i >= 0; i-- {
		if h := s.items[i].h; h.hold.CF() == cf && sameRange(h, r) {
			return i
		}
	}
	return -1
}

// current reports whether items[i] is the latest handle of its range.
func (s *txnRanges) current(i int) bool {
	h := s.items[i].h
	return s.find(h.hold.CF(), Range{Start: h.key(), End: h.hold.RangeEnd()}) == i
}

// sameRange reports whether h locks exactly r: the same Start, and the same End or both none.
func sameRange(h *Handle, r Range) bool {
	end := h.hold.RangeEnd()
	return bytes.Equal(h.key(), r.Start) && (end == nil) == (r.End == nil) && bytes.Equal(end, r.End)
}

// forWrite returns the position of a current, live, exclusive range of the Txn that covers key in
// column family cf, which then protects a write of key; else -1 and the error of the write when a
// range covers key (ErrNotLocked when one is held shared, else ErrLeaseExpired or ErrReleased as
// for the lock of a key), or nil when none does.
func (s *txnRanges) forWrite(cf uint32, key []byte) (int, error) {
	var err error
	for i, x := range s.items {
		h := x.h
		if !h.hold.Covers(cf, key) || !s.current(i) {
			continue
		}
		switch {
		case h.IsExpired():
			if err == nil && h.IsLeaseExpired() {
				err = fmt.Errorf("%w: %q is inside a range lock of this transaction whose lease ended", ErrLeaseExpired, key)
			} else if err == nil {
				err = fmt.Errorf("%w: %q is inside a range lock this transaction released", ErrReleased, key)
			}
		case h.Shared():
			err = fmt.Errorf("%w: %q is inside a range this transaction holds shared; lock the range or the key exclusively to write it", ErrNotLocked, key)
		default:
			return i, nil
		}
	}
	return -1, err
}

// rangeLeaseEnded returns ErrLeaseExpired when the Txn still holds, in column family cf, a range
// that shares a key with r by a lock whose lease has ended: what a read of r would see there is
// no longer protected. A range the Txn released is not checked, as a released key is not.
func (t *Txn) rangeLeaseEnded(cf uint32, r Range) error {
	rs := t.ranges()
	if rs == nil {
		return nil
	}
	for i, x := range rs.items {
		h := x.h
		if h.hold.CF() != cf || !rs.current(i) || h.released() || !overlaps(h, r) {
			continue
		}
		if h.IsLeaseExpired() {
			return fmt.Errorf("%w: the range from %q this transaction holds", ErrLeaseExpired, h.key())
		}
	}
	return nil
}

// overlaps reports whether the range h locks and r share a key.
func overlaps(h *Handle, r Range) bool {
	end := h.hold.RangeEnd()
	return r.below(h.key()) && (end == nil || bytes.Compare(r.Start, end) < 0)
}

// checkedRanges appends to hs the range handles Commit checks: each that protects a staged write,
// and the current handle of each range that no Release returning true gave back.
func (t *Txn) checkedRanges(hs []*Handle) []*Handle {
	rs := t.ranges()
	if rs == nil {
		return hs
	}
	for i, x := range rs.items {
		if x.protects || (!x.h.released() && rs.current(i)) {
			hs = append(hs, x.h)
		}
	}
	return hs
}
