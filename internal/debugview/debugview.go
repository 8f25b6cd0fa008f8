// Package debugview carries from package recordlock to package httpdebug the one view of a
// database that the exported API has no call for: every request queued in it, with the holders
// of the keys they wait for, read in one visit of each shard. Locker.Locks copies every holder,
// which a page about a database holding a million keys cannot afford only to find the few
// holders anybody waits for.
package debugview

// WaitsAndHolders is set by package recordlock, when it is initialised, to a
//
//	func(*recordlock.Locker) ([]recordlock.WaitInfo, []recordlock.LockInfo)
//
// It is typed any because this package cannot import recordlock, which imports it.
var WaitsAndHolders any
