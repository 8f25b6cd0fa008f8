package httpdebug

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/recordlock/recordlock"
)

// holderIndex finds, among the holders shown, those a wait waits for: the holders of its key, and
// where ranges are locked, the holders whose keys or ranges meet the wait's key or range in a
// conflicting mode (docs/DESIGN.md §16.1).
type holderIndex struct {
	locks    []recordlock.LockInfo // sorted by column family, then key (database.locks)
	byRecord map[record][]int      // the positions of the holders of each key
	ranges   []int                 // the positions of the range holders
}

func newHolderIndex(locks []recordlock.LockInfo) *holderIndex {
	x := &holderIndex{locks: locks, byRecord: map[record][]int{}}
	for i, l := range locks {
		if l.IsRange {
			x.ranges = append(x.ranges, i)
		} else {
			x.byRecord[lockRecord(l)] = append(x.byRecord[lockRecord(l)], i)
		}
	}
	return x
}

// of returns the positions of the holders w waits for, in the order of locks; the caller must not
// modify the slice. A wait for a key waits for every holder of it, as the queue of the key has
// it; a holder of a range only when one of the two is exclusive. Where no range is shown, a wait
// costs a map lookup, so a page of many waits on a key of many sharers stays cheap.
func (x *holderIndex) of(w recordlock.WaitInfo) []int {
	if !w.IsRange && len(x.ranges) == 0 {
		return x.byRecord[waitRecord(w)]
	}
	var out []int
	if !w.IsRange {
		out = append(out, x.byRecord[waitRecord(w)]...)
	} else {
		end := w.RangeEnd
		first, _ := slices.BinarySearchFunc(x.locks, w, func(l recordlock.LockInfo, w recordlock.WaitInfo) int {
			return cmp.Or(cmp.Compare(l.ColumnFamilyID, w.ColumnFamilyID), bytes.Compare(l.Key, w.Key))
		})
		for i := first; i < len(x.locks); i++ {
			l := x.locks[i]
			if l.ColumnFamilyID != w.ColumnFamilyID || (end != nil && bytes.Compare(l.Key, end) >= 0) {
				break
			}
			if !l.IsRange && (!l.Shared || !w.Shared) {
				out = append(out, i)
			}
		}
	}
	for _, i := range x.ranges {
		l := x.locks[i]
		if l.ColumnFamilyID == w.ColumnFamilyID && (!l.Shared || !w.Shared) && meet(l, w) {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// meet reports whether the range of l and the key or range of w share a key.
func meet(l recordlock.LockInfo, w recordlock.WaitInfo) bool {
	if l.RangeEnd != nil && bytes.Compare(w.Key, l.RangeEnd) >= 0 {
		return false // w starts at or after l's end
	}
	if !w.IsRange {
		return bytes.Compare(l.Key, w.Key) <= 0
	}
	return w.RangeEnd == nil || bytes.Compare(l.Key, w.RangeEnd) < 0
}
