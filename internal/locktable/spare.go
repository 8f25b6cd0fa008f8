package locktable

// Spare entries: a shard reuses the entries of keys that left the table, so that keys coming
// and going do not allocate, and lets them go once it is idle.

// maxSpare bounds the allocated entries a busy shard keeps for reuse, so that keys coming and
// going do not allocate.
const maxSpare = 16

// newEntry returns an empty entry for a key of the given hash, reusing a spare one if it can.
func (sh *shard) newEntry(hash uint64) *keyEntry {
	e := sh.spareOwn
	switch {
	case e != nil:
		sh.spareOwn = e.nextSpare()
	case sh.spare != nil:
		e = sh.spare
		sh.spare = e.nextSpare()
		sh.nSpare--
	default:
		return &keyEntry{hash: hash}
	}
	e.setNextSpare(nil)
	e.hash = hash
	return e
}

// owns reports whether e is one of the shard's own entries.
func (sh *shard) owns(e *keyEntry) bool {
	for i := range sh.ownEntries {
		if e == &sh.ownEntries[i] {
			return true
		}
	}
	return false
}

// remove takes e, which has neither holder nor waiters, out of the table and keeps it for reuse.
// Once no key of the shard is held or waited on, the shard holds no allocated entry: a table
// whose keys come and go returns to its idle size.
// An entry of a home shard leaves its space's index after it (rangedKey.served).
func (sh *shard) remove(e *keyEntry) {
	sh.index.remove(e)
	sh.unnote(e)
	// e has no holder and no waiters, so every pointer of it is nil already except the link,
	// which the spare list takes over.
	e.wakePending = false
	switch {
	case sh.owns(e):
		e.setNextSpare(sh.spareOwn)
		sh.spareOwn = e
	case sh.nSpare < maxSpare:
		e.setNextSpare(sh.spare)
		sh.spare = e
		sh.nSpare++
	}
	if sh.index.n == 0 {
		sh.spare, sh.nSpare = nil, 0
	}
}
