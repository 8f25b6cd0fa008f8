package locktable

import "math/bits"

// Spare entries: a shard reuses the entries of keys that left the table, so that keys coming
// and going do not allocate, and lets them go once it is idle.

// maxSpare bounds the allocated entries a busy shard keeps for reuse, so that keys coming and
// going do not allocate.
const maxSpare = 16

// newEntry returns an empty entry for a key of the given hash, reusing a spare one if it can.
func (sh *shard) newEntry(hash uint64) *keyEntry {
	var e *keyEntry
	switch {
	case sh.ownSpare != 0:
		i := bits.TrailingZeros8(sh.ownSpare)
		sh.ownSpare &^= 1 << i
		e = &sh.ownEntries[i]
	case sh.nSpare > 0:
		sh.nSpare--
		e, sh.spare[sh.nSpare] = sh.spare[sh.nSpare], nil
	default:
		return &keyEntry{hash: hash}
	}
	e.hash = hash
	return e
}

// ownIndex is e's place among the shard's own entries, or -1 when e is not one of them.
func (sh *shard) ownIndex(e *keyEntry) int {
	for i := range sh.ownEntries {
		if e == &sh.ownEntries[i] {
			return i
		}
	}
	return -1
}

// remove takes e, which has neither holder nor waiters, out of the table and keeps it for reuse.
// Once no key of the shard is held or waited on, the shard holds no allocated entry: a table
// whose keys come and go returns to its idle size.
// An entry of a home shard leaves its space's index of keys with it.
func (sh *shard) remove(e *keyEntry) {
	sh.index.remove(e)
	sh.unnote(e)
	if sp := e.space; sp != nil {
		sp.keyLeft(e)
	}
	// e has no holder and no waiters, so every pointer of it is nil already but those of a home
	// shard's entry.
	e.space, e.keyClaim = nil, nil
	e.wakePending = false
	switch i := sh.ownIndex(e); {
	case i >= 0:
		sh.ownSpare |= 1 << i
	case sh.nSpare < maxSpare:
		sh.spare[sh.nSpare] = e
		sh.nSpare++
	}
	if sh.index.n == 0 {
		clear(sh.spare[:sh.nSpare])
		sh.nSpare = 0
	}
}
