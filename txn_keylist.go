package recordlock

import "bytes"

// keyed is an entry of a keyList: something about one record, a key in a column family.
type keyed interface {
	entryCF() uint32
	entryKey() []byte
}

// scanLimit is how many entries a keyList scans before it builds a map.
const scanLimit = 8

// keyList keeps entries in insertion order and finds the latest for a given record: by a
// backward scan while it is short (most transactions touch a few keys), by a map once it is
// longer.
type keyList[T keyed] struct {
	items []T
	// index maps column family ID → key → position of the record's latest entry, once
	// len(items) > scanLimit. Nested rather than keyed by a struct so that a lookup converts the
	// key to a string without allocating.
	index map[uint32]map[string]int
	small [2]T // the first entries, so a small Txn allocates no slice
}

// find returns the position of the latest entry for the record (cf, key), or -1.
func (s *keyList[T]) find(cf uint32, key []byte) int {
	if s.index != nil {
		if i, ok := s.index[cf][string(key)]; ok {
			return i
		}
		return -1
	}
	for i := len(s.items) - 1; i >= 0; i-- {
		if s.items[i].entryCF() == cf && bytes.Equal(s.items[i].entryKey(), key) {
			return i
		}
	}
	return -1
}

// latest returns the latest entry for the record (cf, key).
func (s *keyList[T]) latest(cf uint32, key []byte) (T, bool) {
	if i := s.find(cf, key); i >= 0 {
		return s.items[i], true
	}
	var zero T
	return zero, false
}

func (s *keyList[T]) add(x T) {
	if s.items == nil {
		s.items = s.small[:0]
	}
	s.items = append(s.items, x)
	switch {
	case s.index != nil:
		s.indexAt(len(s.items) - 1)
	case len(s.items) > scanLimit:
		s.reindex()
	}
}

// reindex builds the index afresh from every entry.
func (s *keyList[T]) reindex() {
	s.index = make(map[uint32]map[string]int, 1)
	for i := range s.items {
		s.indexAt(i)
	}
}

// indexAt records items[i] as the latest entry of its record.
func (s *keyList[T]) indexAt(i int) {
	x := s.items[i]
	m := s.index[x.entryCF()]
	if m == nil {
		m = make(map[string]int, 2*len(s.items))
		s.index[x.entryCF()] = m
	}
	m[string(x.entryKey())] = i
}

// truncate keeps the first n entries and drops the rest.
func (s *keyList[T]) truncate(n int) {
	if n >= len(s.items) {
		return
	}
	clear(s.items[n:]) // the dropped entries must not pin what they refer to
	s.items = s.items[:n]
	if s.index == nil {
		return
	}
	s.index = nil
	if n > scanLimit {
		s.reindex()
	}
}
