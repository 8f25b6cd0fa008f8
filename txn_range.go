package recordlock

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/linxGnu/grocksdb"
	"github.com/recordlock/recordlock/internal/spans"
)

// A Txn's range locks (docs/DESIGN.md §16.1). They are kept apart from its key locks, in the order
// taken, since a range is not a record, and indexed by span, so that "which of my m ranges covers
// this key" costs O(log m). A Txn that never locked a range has none of this (Txn.ranges returns
// nil).

// txnRanges are the range locks of a Txn, in its txnRare.
type txnRanges struct {
	// items are every range handle the Txn took, in order; of the handles of one range (column
	// family, Start, End) the latest is current, as for a record in Txn.locks.
	items []txnLock
	// byCF indexes the positions of items by span, per column family, and latest is the position
	// of the current handle of each range, by rangeID.
	byCF   map[uint32]*spans.Index[int]
	latest map[string]int
}

// add appends x, the handle of a range the Txn just took, which is then its range's current one.
func (s *txnRanges) add(x txnLock) {
	i := len(s.items)
	s.items = append(s.items, x)
	h := x.h
	cf, start, end := h.claim.Record()
	if s.byCF == nil {
		s.byCF, s.latest = map[uint32]*spans.Index[int]{}, map[string]int{}
	}
	idx := s.byCF[cf]
	if idx == nil {
		idx = &spans.Index[int]{}
		s.byCF[cf] = idx
	}
	idx.Insert(start, end, i) // the claim's own copies, which never change
	s.latest[string(appendRangeID(nil, cf, start, end))] = i
}

// appendRangeID appends to b the bytes that name the range [start, end) of column family cf: the
// family, the length of start, start, and end after a byte that tells a nil end from an empty one.
func appendRangeID(b []byte, cf uint32, start, end []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, cf)
	b = binary.AppendUvarint(b, uint64(len(start)))
	b = append(b, start...)
	if end == nil {
		return append(b, 0)
	}
	return append(append(b, 1), end...)
}

// covering returns the positions, in order, of the handles whose range in column family cf
// holds key, appended to out.
func (s *txnRanges) covering(cf uint32, key []byte, out []int) []int {
	if idx := s.byCF[cf]; idx != nil {
		idx.Containing(key, func(i int) bool {
			out = append(out, i)
			return true
		})
	}
	slices.Sort(out)
	return out
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
// ErrClosed, ErrTooManyLocks), with ErrTxnDone once the Txn ended, and at once with an error matching ErrDeadlock
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
	t.rareParts().rngs.add(txnLock{h: h})
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
	var buf [8]int
	for _, i := range s.covering(cf, key, buf[:0]) {
		h := s.items[i].h
		if h.Shared() && !shared {
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
	var buf [64]byte
	if i, ok := s.latest[string(appendRangeID(buf[:0], cf, r.Start, r.End))]; ok {
		return i
	}
	return -1
}

// current reports whether items[i] is the latest handle of its range.
func (s *txnRanges) current(i int) bool {
	cf, start, end := s.items[i].h.claim.Record()
	return s.find(cf, Range{Start: start, End: end}) == i
}

// forWrite returns the position of a current, live, exclusive range of the Txn that covers key in
// column family cf, which then protects a write of key; else -1 and the error of the write when a
// range covers key (ErrNotLocked when one is held shared, else ErrLeaseExpired or ErrReleased as
// for the lock of a key), or nil when none does.
func (s *txnRanges) forWrite(cf uint32, key []byte) (int, error) {
	var err error
	var buf [8]int
	for _, i := range s.covering(cf, key, buf[:0]) {
		h := s.items[i].h
		if !s.current(i) {
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
	idx := rs.byCF[cf]
	if idx == nil {
		return nil
	}
	var meeting []int
	idx.Meeting(r.Start, r.End, func(i int) bool {
		meeting = append(meeting, i)
		return true
	})
	slices.Sort(meeting)
	for _, i := range meeting {
		h := rs.items[i].h
		if !rs.current(i) || h.released() {
			continue
		}
		if h.IsLeaseExpired() {
			return fmt.Errorf("%w: the range from %q this transaction holds", ErrLeaseExpired, h.key())
		}
	}
	return nil
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
