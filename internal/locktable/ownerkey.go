package locktable

import "unsafe"

// ownerKey is an owner as the wait-for graph's maps key it: the pointer its Owner value holds.
// An owner is a pointer to an object of its own (a Txn), so two Owners are the same owner exactly
// when their pointers are equal, as == tells. Keyed by the interface itself, a map hashes and
// compares every key through its dynamic type, and with two words a key misses the maps' fast
// paths for pointers; a Txn's wait on a hot key makes about a dozen such accesses, all under the
// graph's one mutex.
type ownerKey unsafe.Pointer

// keyOf is o's key; the key of no owner is nil.
func keyOf(o Owner) ownerKey {
	return ownerKey((*[2]unsafe.Pointer)(unsafe.Pointer(&o))[1])
}
