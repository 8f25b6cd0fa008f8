package locktable

import "bytes"

// entryTable is one shard's index of the keys that are held or waited on: an open-addressing
// hash table with linear probing over the 64-bit key hash the shard was chosen by. It replaces a
// Go map because an uncontended Lock and Release each touch it once, and a map costs a second
// hash of the key, a lookup before every insert, and a reseed whenever it empties. Unlike a map
// it shrinks: once its keys are gone it returns to its idle size.
type entryTable struct {
	slots []*keyEntry // nil, own, or a power-of-two number of slots
	n     int         // entries stored
	// own is the storage of a small table, inside the shard: a shard with a few keys at a time
	// writes only its own cache lines.
	own [minSlots]*keyEntry
}

const (
	// minSlots is the size of a table in use, kept in the table itself, so that a shard whose
	// keys come and go allocates nothing.
	minSlots = 8
	// hashShift skips the hash bits that chose the shard, which every key of a shard shares.
	hashShift = shardBits + 1
)

func (t *entryTable) home(hash uint64) int { return int(hash>>hashShift) & (len(t.slots) - 1) }

// find returns the entry of the record (cf, key), whose hash is hash, or nil.
func (t *entryTable) find(hash uint64, cf uint32, key []byte) *keyEntry {
	if t.n == 0 {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.home(hash); ; i = (i + 1) & mask {
		e := t.slots[i]
		if e == nil {
			return nil
		}
		if e.hash == hash {
			if ecf, ekey := e.record(); ecf == cf && bytes.Equal(ekey, key) {
				return e
			}
		}
	}
}

// insert adds e, whose key must not be in the table yet.
func (t *entryTable) insert(e *keyEntry) {
	switch {
	case t.slots == nil:
		t.slots = t.own[:]
	case (t.n+1)*4 > len(t.slots)*3: // keep the load at most 3/4
		t.resize(len(t.slots) * 2)
	}
	t.place(e)
	t.n++
}

// place puts e in the first free slot from its home.
func (t *entryTable) place(e *keyEntry) {
	mask := len(t.slots) - 1
	i := t.home(e.hash)
	for t.slots[i] != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = e
}

// remove takes e out of the table. It reports false, changing nothing, if e is not in it.
func (t *entryTable) remove(e *keyEntry) bool {
	if t.n == 0 {
		return false
	}
	mask := len(t.slots) - 1
	i := t.home(e.hash)
	for t.slots[i] != e {
		if t.slots[i] == nil {
			return false
		}
		i = (i + 1) & mask
	}
	// Backward-shift deletion: move later entries of the probe run into the hole when their home
	// allows, so that no tombstones accumulate.
	for j := (i + 1) & mask; t.slots[j] != nil; j = (j + 1) & mask {
		if h := t.home(t.slots[j].hash); (j-h)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = nil
	t.n--
	if len(t.slots) > minSlots && t.n*8 < len(t.slots) {
		size := max(minSlots, len(t.slots)/4)
		if t.n == 0 {
			size = minSlots
		}
		t.resize(size)
	}
	return true
}

// resize rehashes the entries into size slots: own when size is minSlots.
func (t *entryTable) resize(size int) {
	if size == minSlots {
		t.rehashInto(t.own[:])
	} else {
		t.rehashInto(make([]*keyEntry, size))
	}
}

// rehashInto moves the entries into slots, empty and of a power-of-two size that holds them.
func (t *entryTable) rehashInto(slots []*keyEntry) {
	old := t.slots
	t.slots = slots
	for _, e := range old {
		if e != nil {
			t.place(e)
		}
	}
	if len(old) == minSlots { // old was own: leave it empty for when the table shrinks again
		clear(old)
	}
}

// grownFor is the size the table must grow to so that k more entries go in without a resize,
// or 0 if they go in already (or only own's slots are needed, which take no rehash).
func (t *entryTable) grownFor(k int) int {
	size := max(len(t.slots), minSlots)
	for (t.n+k)*4 > size*3 {
		size *= 2
	}
	if size == max(len(t.slots), minSlots) {
		return 0
	}
	return size
}

// all calls f on every entry; f must not insert or remove.
func (t *entryTable) all(f func(*keyEntry)) {
	for _, e := range t.slots {
		if e != nil {
			f(e)
		}
	}
}

// keyEntry is the table's record of one key that is held or waited on. Entries are reused within
// their shard, so that an uncontended Lock allocates only its Handle; nothing refers to an entry
// once it has left the table (the handles that used it were given back or gave up). The holders
// are kept as holders.go describes.
//
// Invariants, whenever its shard's mutex is released (a build with the tag invariants checks
// each there: shard_check.go):
//   - It is held or waited on, and in the index of the shard its hash names, found by its own
//     hash and record; its space and keyClaim are set exactly when that shard is a home shard.
//   - holder is nil exactly while the key is free, and then shares is 0 and sharers empty.
//     While one exclusive holder holds it, shares is 0 and sharers empty; while it is held
//     shared, shares counts the holder and the sharers, each shared and at its recorded place.
//   - Each holder is marked held, its e is the entry, it waits for nothing, and it is marked
//     flagInHomeShard exactly in a home shard. A dead holder (released or expired) is inside a
//     fence that passes the key on as it ends.
//   - While a request is queued, the deadline of every live holder is on a timer.
//   - The queue is linked both ways from head to tail. Each request in it is its claim's (h.w),
//     for this entry, asleep or woken, its timeout on a timer; in a key shard the upgrades are
//     ahead of every other request.
//   - wakePending is set exactly while one request of the queue is woken; at most one is.
//   - ownersHolding counts the queued requests whose owner held other keys as it asked.
//   - In a key shard, the request a shared request's record leads to (exclusiveAhead), the edge
//     the wait-for graph reads, is the nearest exclusive one queued ahead of it, or, with none
//     but upgrades ahead, an upgrade, or none.
type keyEntry struct {
	hash       uint64
	holder     *Claim // the exclusive holder or one sharer; nil exactly while the key is free
	head, tail *waiter
	// In a home shard, space is the range space the entry's key is in, and keyClaim a claim of
	// the key, whose key orders the entry in the space's index (rangespace.go): the entry keeps it
	// so that the index finds the entry after its last holder and waiter left. Both are nil in a
	// key shard.
	space       *rangeSpace
	keyClaim    *Claim
	shares      int32 // holders in shared mode, holder included; 0 while held exclusively or free
	wakePending bool  // the head waiter was woken and has not yet looked at the key
	// unwatched is set when a sharer was granted with nothing queued, so its deadline may be off
	// the scheduler; the next request to queue watches every holder.
	unwatched bool
	// ownersHolding counts the queued requests whose owner held other keys as it asked (up to
	// its bound; one past it is not counted, and may be passed as any request may): while there
	// are any, no newcomer passes the oldest waiter (keyEntry.bargeable). 16 bits keep the
	// entry's hot fields in one cache line.
	ownersHolding uint16
	sharers       *sharerList // the sharers other than holder, each knowing its place (sharePos)
}

// record is the entry's column family and key, as held by its holder or, while the key is free,
// its oldest waiter.
func (e *keyEntry) record() (uint32, []byte) {
	if h := e.firstClaim(); h != nil {
		return h.cf, h.key()
	}
	return 0, nil
}

// firstClaim is a claim of the entry's key: its holder or, while the key is free, its oldest
// waiter; nil while it has neither.
func (e *keyEntry) firstClaim() *Claim {
	switch {
	case e.holder != nil:
		return e.holder
	case e.head != nil:
		return e.head.h
	}
	return nil
}
