// Package debugview carries from package recordlock to package httpdebug the one view of a
// database that the exported API has no call for: every request queued in it, with the holders
// of the keys they wait for, read in one visit of each shard. Locker.Locks copies every holder,
// which a page about a database holding a million keys cannot afford only to find the few
// holders anybody waits for.
//
// This package cannot name recordlock's types, since recordlock imports it, so the view's type
// is generic over them: recordlock lends it as a Source of its own Locker, WaitInfo and LockInfo,
// and httpdebug borrows it under the same three types. Both calls are checked by the compiler on
// their side; Borrow checks that the two agree.
package debugview

import "fmt"

// Source returns every request queued now in l's database and the holders of the keys they
// wait for.
type Source[L, W, H any] func(l L) (waits []W, holders []H)

// lent is the Source that Lend was given.
var lent any

// Lend makes s the view Borrow returns. Package recordlock calls it once, as it is initialised.
func Lend[L, W, H any](s Source[L, W, H]) { lent = s }

// Borrow returns the Source that Lend was given. It panics if none was, or if it was lent under
// other types; either is a build of these packages that does not match, not a runtime condition.
func Borrow[L, W, H any]() Source[L, W, H] {
	s, ok := lent.(Source[L, W, H])
	if !ok {
		panic(fmt.Sprintf("debugview: no Source[%T, %T, %T] was lent (lent: %T)", *new(L), *new(W), *new(H), lent))
	}
	return s
}
