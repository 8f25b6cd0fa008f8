package locktable

import (
	"sync/atomic"
	"unsafe"
)

// Stamps mints the strictly increasing timestamps (Unix nanoseconds) of one database.
type Stamps struct {
	last atomic.Int64
	_    [falseSharingRange - unsafe.Sizeof(atomic.Int64{})]byte // every lock of the database writes last: no neighbours
}

// Mint returns the wall reading now (Unix nanoseconds), or last+1 when now is not past the last
// one minted.
func (s *Stamps) Mint(now int64) int64 {
	for {
		last := s.last.Load()
		next := max(now, last+1)
		if s.last.CompareAndSwap(last, next) {
			return next
		}
	}
}
