package recordlock

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Coordinator grants cluster rounds: the cluster-wide half of a ScopeCluster lock. The Locker
// takes the local key first, then calls Acquire with what is left of Options.Timeout (with a
// zero Timeout and a ctx deadline, of the time until that deadline), then joins the returned
// round (Handle.JoinClusterRound). Only coordinator authors implement it; see Writing a
// coordinator in the package documentation.
type Coordinator interface {
	// Acquire admits this node to key for at most lease. revoke is what the coordinator calls to
	// recall the admission early; it ends in Handle.RevokeLease. On failure the Locker gives the
	// local key back and returns the error wrapped so that it matches ErrClusterUnavailable,
	// ErrTimeout or the ctx error.
	Acquire(ctx context.Context, key []byte, lease time.Duration, revoke func()) (Round, error)
}

// Round is one granted cluster admission, as Coordinator.Acquire returns it (see Writing a
// coordinator in the package documentation).
type Round struct {
	// TsR is the round's timestamp; the handle's AcquiredAt and ClusterTsR become TsR.
	TsR Timestamp
	// MintedMono is the Locker clock's Mono() read before the round was requested; the lease is
	// measured from it, so this node's deadline never falls after the cluster's.
	MintedMono time.Duration
	// Token is a fencing token that increases per key across the cluster; 0 when there is none.
	Token uint64
	// Release gives the admission back; it becomes the handle's release hook.
	Release func() error
}

// coordinatorSlot is a database's coordinator, shared by all its Lockers.
type coordinatorSlot struct {
	p atomic.Pointer[coordinatorState]
}

type coordinatorState struct {
	c          Coordinator // nil once removed
	standalone bool        // removed with standalone=true: the database is node-only again
}

func (s *coordinatorSlot) set(c Coordinator) { s.p.Store(&coordinatorState{c: c}) }

func (s *coordinatorSlot) remove(standalone bool) {
	s.p.Store(&coordinatorState{standalone: standalone})
}

// choose returns the coordinator a lock with options r must go through, nil for a node lock,
// or ErrClusterUnavailable when cluster scope cannot be granted and must fail closed.
func (s *coordinatorSlot) choose(r *Resolved) (Coordinator, error) {
	if r.Scope == ScopeNode {
		return nil, nil
	}
	st := s.p.Load()
	switch {
	case st != nil && st.c != nil:
		return st.c, nil
	case r.ScopeRequested:
		return nil, fmt.Errorf("%w: cluster scope requested but the database has no coordinator", ErrClusterUnavailable)
	case st == nil || st.standalone:
		return nil, nil
	}
	return nil, fmt.Errorf("%w: the database's coordinator was removed without declaring it standalone", ErrClusterUnavailable)
}
