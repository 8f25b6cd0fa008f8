package locktable

import (
	"errors"
	"time"
)

// The table's refusals. They are the API's sentinels too (recordlock.ErrLocked is ErrLocked), so
// their messages are the API's and a refusal reaches the user as it is. A request that fails
// with its ctx returns the ctx's error unchanged.
var (
	ErrClosed       = errors.New("recordlock: locker closed")
	ErrLocked       = errors.New("recordlock: key is locked")
	ErrTimeout      = errors.New("recordlock: timed out waiting for the key")
	ErrReleased     = errors.New("recordlock: lock already released")
	ErrLeaseExpired = errors.New("recordlock: lease expired")
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
