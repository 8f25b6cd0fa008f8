package locktable

import (
	"errors"
	"time"
)

// The table's refusals. The API turns each into its own sentinel; a request that fails with
// its ctx returns the ctx's error unchanged.
var (
	ErrClosed       = errors.New("locktable: tenant closed")
	ErrLocked       = errors.New("locktable: key held")
	ErrTimeout      = errors.New("locktable: wait timed out")
	ErrReleased     = errors.New("locktable: hold released")
	ErrLeaseExpired = errors.New("locktable: lease ended")
	// ErrFenceInOwnFence is what Fence reports to a commit that fences its own claim again.
	ErrFenceInOwnFence = errors.New("locktable: fence inside its own fence")
	// ErrGrantedAfterClose is what a wait reports when the key was handed to the claim but its
	// tenant closed meanwhile: Acquire gives the key back, and Acquire and Upgrade fail with ErrClosed.
	ErrGrantedAfterClose = errors.New("locktable: key granted after Close")
)

// DeadlockError names the cycle of owners that a request would have closed, for the API to turn
// into its own; its request was taken out of the queue.
type DeadlockError struct {
	// Cycle lists the owners of the cycle, starting with the one whose request failed: each waits
	// for the next (docs/DESIGN.md §15.5), and the last for the first.
	Cycle []Wait
	// For the debug record: how many other requests were queued for the failed request's key, and
	// how long its holder (the first, when it is held shared) had held it.
	Waiters   int
	HolderAge time.Duration
}

// Wait is one owner of a deadlock cycle and the record it waits for.
type Wait struct {
	Owner Owner
	CF    uint32
	Key   []byte
}

func (e *DeadlockError) Error() string { return "locktable: deadlock" }
