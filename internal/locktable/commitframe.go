package locktable

import "runtime"

// A commit that runs user code (Fence's) may call back into its own claim, and such a call must
// not wait for the fence that runs it. Go gives a goroutine no public identity, so the fence marks
// the stack instead: it calls the commit through runUserCommit, and a call that finds a user's
// fence running looks for that frame on its own stack. Finding it says the caller is inside some
// user's commit, not which one: a call from the commit of a fence on another claim is taken for
// a call from the fence's own commit, and does not wait either (docs/DESIGN.md §5.1).

// runUserCommit calls commit; its frame on a stack marks a user's commit in progress.
//
//go:noinline
func runUserCommit(commit func() error) error { return commit() }

// userCommitEntry is the entry address of runUserCommit, read off a call of it, so that no
// wrapper the compiler puts in front of a function value can differ from the frame on a stack.
var userCommitEntry = func() (entry uintptr) {
	_ = runUserCommit(func() error {
		var pc [1]uintptr
		runtime.Callers(2, pc[:]) // skips runtime.Callers and this function
		entry = runtime.FuncForPC(pc[0] - 1).Entry()
		return nil
	})
	return entry
}()

// userCommitsOnStack counts the user's commits the calling goroutine is inside, stopping at the
// first when atMostOne. It walks the whole stack, 32 frames a step: it is only called once a
// fence is found running, never on an uncontended path.
func userCommitsOnStack(atMostOne bool) int {
	var pcs [32]uintptr
	found := 0
	for skip := 2; ; skip += len(pcs) {
		n := runtime.Callers(skip, pcs[:])
		for _, pc := range pcs[:n] {
			// A return address points past its call; pc-1 is inside the calling function. The
			// entry is the outermost function's when pc is in inlined code, and runUserCommit
			// inlines nothing that calls back here.
			if f := runtime.FuncForPC(pc - 1); f != nil && f.Entry() == userCommitEntry {
				if found++; atMostOne {
					return found
				}
			}
		}
		if n < len(pcs) {
			return found
		}
	}
}
