package recordlock

import (
	"sync/atomic"
	"time"
	"unsafe"
)

// Timestamp is a wall-anchored instant in Unix nanoseconds. The timestamps of one database are
// strictly increasing across all its Lockers and goroutines, even when the wall clock steps back.
type Timestamp int64

// Time converts t to a time.Time.
func (t Timestamp) Time() time.Time { return time.Unix(0, int64(t)) }

// timestampSource mints the strictly increasing timestamps of one database.
type timestampSource struct {
	last atomic.Int64
	_    [falseSharingRange - unsafe.Sizeof(atomic.Int64{})]byte // every Lock of the database writes last: no neighbours
}

// mint returns the wall reading now (Unix nanoseconds) as a Timestamp, or last+1 when now is not
// past the last one minted.
func (s *timestampSource) mint(now int64) Timestamp {
	for {
		last := s.last.Load()
		next := max(now, last+1)
		if s.last.CompareAndSwap(last, next) {
			return Timestamp(next)
		}
	}
}
