// Package debugview lets package httpdebug call the one view of a database that package
// recordlock keeps from its users: every request queued in it, with the holders of the keys they
// wait for, read in one visit of each shard. Locker.Locks copies every holder, which a page about
// a database holding a million keys cannot afford only to find the few holders anybody waits for.
//
// recordlock exports that view as Locker.WaitsAndHolders, whose argument is a Pass. Only packages
// of this module can import this one and so make a Pass: the method is exported, so the compiler
// checks both sides of the call, yet nothing outside the module can call it.
package debugview

// Pass is the argument of what recordlock exports for this module's packages alone.
type Pass struct{ _ struct{} }
