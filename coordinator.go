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
	// Acquire admits this node to the record req names, in req's mode, for at most req.Lease.
	// On failure the Locker gives the local key back and returns the error wrapped so that it
	// matches ErrClusterUnavailable, ErrTimeout or the ctx error.
	Acquire(ctx context.Context, req Request) (Round, error)
}

// Request is what a cluster lock asks of the Coordinator. It is a struct so that what a lock can
// ask of the cluster can grow without breaking coordinators.
type Request struct {
	// ColumnFamily is the name of the lock's column family, "default" for the plain calls: nodes'
	// databases share names, not IDs. A lock's identity across the cluster is (ColumnFamily, Key),
	// so the same key bytes in two column families are two records.
	ColumnFamily string
	// Key is the record's key. The Locker may reuse it once Acquire returns: a coordinator that
	// keeps it copies it.
	Key []byte
	// Shared is the lock's mode: any number of shared holders of a record may be admitted at
	// once, on any nodes; an exclusive one excludes every other holder on every node.
	Shared bool
	// Lease is the lock's lease: the longest a round granted for it may last.
	Lease time.Duration
	// Revoke is what the coordinator calls to recall the admission early; it ends in
	// Handle.RevokeLease.
	Revoke func()
	// Txn is the Txn that locks, zero outside one: a coordinator that detects deadlocks across
	// nodes names it with its node.
	Txn TxnRef
	// Waits is the node's view of the waits of its Txns in its own table, which such a
	// coordinator follows from a Txn it finds holding a record another node waits for.
	Waits LocalWaits
}

// TxnRef names a Txn: its ID, unique among the live Txns of the process (with the node's name,
// across a cluster), and its TxnOptions.Name.
type TxnRef struct {
	ID   uint64
	Name string
}

// LocalWaits is a database's view of the waits of its Txns in its own key-lock table.
type LocalWaits interface {
	// WaitOf reports what the Txn with ID txn waits for in this node's table now, and false when
	// it does not wait there.
	WaitOf(txn uint64) (LocalWait, bool)
}

// LocalWait is one Txn's wait in a node's table: the record it asks for, and the Txns it waits
// for (those holding the record in a conflicting mode, and for a shared request the nearest
// exclusive request of a Txn queued ahead of it).
type LocalWait struct {
	ColumnFamily string
	Key          []byte
	For          []TxnRef
}

// Round is one granted cluster admission, as Coordinator.Acquire returns it (see Writing a
// coordinator in the package documentation).
type Round struct {
	// TsR is the round's timestamp; the handle's AcquiredAt and ClusterTsR become TsR, except
	// that a Txn's upgrade keeps the ones of the shared round it replaces.
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
