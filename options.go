package recordlock

import (
	"cmp"
	"fmt"
	"time"
)

// Bounds and defaults of Options.
const (
	DefaultLease   = 30 * time.Second
	MinLease       = 100 * time.Millisecond
	MaxLease       = 5 * time.Minute
	DefaultTimeout = 30 * time.Second
	MinTimeout     = time.Millisecond
	MaxTimeout     = 5 * time.Minute
)

// Scope says how far a lock excludes other holders.
type Scope uint8

const (
	// ScopeDefault is cluster scope when the database has a coordinator and node scope when it
	// never had one (see SetCoordinator and RemoveCoordinator).
	ScopeDefault Scope = iota
	// ScopeCluster excludes holders on every node; it fails with ErrClusterUnavailable when no
	// coordinator can grant it.
	ScopeCluster
	// ScopeNode excludes holders in this process only.
	ScopeNode
)

func (s Scope) String() string {
	switch s {
	case ScopeDefault:
		return "default"
	case ScopeCluster:
		return "cluster"
	case ScopeNode:
		return "node"
	}
	return fmt.Sprintf("Scope(%d)", uint8(s))
}

// Options configure one Lock or TryLock call. The zero value asks for every default.
type Options struct {
	// Lease bounds how long the lock authorizes writes. Zero means DefaultLease; otherwise it
	// must lie within MinLease..MaxLease.
	Lease time.Duration
	// Timeout bounds how long Lock waits for a busy key. Zero means DefaultTimeout, or, when the
	// ctx of the call has a deadline, that deadline alone; otherwise it must lie within
	// MinTimeout..MaxTimeout, and a ctx deadline applies as well.
	Timeout time.Duration
	// Hold makes the lock outlive the Txn that took it; only Release or the lease end it.
	Hold bool
	// Scope is ScopeDefault (zero), ScopeCluster or ScopeNode.
	Scope Scope
	// Shared asks for a shared lock, which other shared holders of the record may hold at the
	// same time; false (zero) asks for an exclusive one, which excludes every other holder. A
	// Txn writes a record only under an exclusive lock.
	Shared bool
}

// Resolved is Options validated and with every default filled in, as Options.Resolve returns it:
// what a Lock with those Options asks for. Code that needs that before locking reads it here: the
// lease a Coordinator's Acquire will be given, the Timeout the wait gets, and whether the lock
// stays on this node or goes through the coordinator (see Writing a coordinator in the package
// documentation).
type Resolved struct {
	// Lease is Options.Lease, or DefaultLease for zero: the lease a Lock asks of the coordinator.
	Lease time.Duration
	// Timeout is Options.Timeout, or DefaultTimeout for zero. With a zero Options.Timeout a Lock
	// whose ctx has a deadline waits until that deadline instead, which only the call knows.
	Timeout time.Duration
	// Hold is Options.Hold.
	Hold bool
	// Scope is ScopeNode for node scope and ScopeCluster otherwise: ScopeDefault resolves to
	// ScopeCluster, which runs as a node lock where the database never had a coordinator.
	Scope Scope
	// ScopeRequested is true when the caller named a scope, which makes ScopeCluster fail closed.
	ScopeRequested bool
	// Shared is Options.Shared: a shared lock.
	Shared bool
}

// Resolve validates o and fills in the defaults, exactly as every Lock does with its Options.
// Applications need not call it before locking; they call it to check Options up front (ones
// read from configuration fail at start-up rather than at the first Lock), to log the settings in
// effect, or, writing or testing a Coordinator, to see the lease its Acquire will be asked for
// (see Writing a coordinator in the package documentation). On failure it returns an
// *OptionError that matches ErrInvalidOptions, and the zero Resolved.
func (o Options) Resolve() (Resolved, error) {
	r := Resolved{
		Lease:          cmp.Or(o.Lease, DefaultLease),
		Timeout:        cmp.Or(o.Timeout, DefaultTimeout),
		Hold:           o.Hold,
		Scope:          ScopeCluster,
		ScopeRequested: o.Scope != ScopeDefault,
		Shared:         o.Shared,
	}
	if o.Scope == ScopeNode {
		r.Scope = ScopeNode
	}
	// One range check for the usual, valid case; the error is worked out only when it fails.
	if r.Lease < MinLease || r.Lease > MaxLease || r.Timeout < MinTimeout || r.Timeout > MaxTimeout || o.Scope > ScopeNode {
		return Resolved{}, o.invalid()
	}
	return r, nil
}

// invalid returns the *OptionError of the first invalid field of o.
func (o Options) invalid() error {
	if _, err := resolveDuration("Lease", o.Lease, DefaultLease, MinLease, MaxLease); err != nil {
		return err
	}
	if _, err := resolveDuration("Timeout", o.Timeout, DefaultTimeout, MinTimeout, MaxTimeout); err != nil {
		return err
	}
	return &OptionError{Field: "Scope", Value: o.Scope, Reason: "must be ScopeDefault, ScopeCluster or ScopeNode"}
}

// resolveDuration applies the zero-means-default rule and the range check shared by every
// duration option.
func resolveDuration(field string, v, def, lo, hi time.Duration) (time.Duration, error) {
	switch {
	case v == 0:
		return def, nil
	case v < 0:
		return 0, &OptionError{Field: field, Value: v, Reason: "must not be negative"}
	case v < lo:
		return 0, &OptionError{Field: field, Value: v, Reason: fmt.Sprintf("must be at least %v", lo)}
	case v > hi:
		return 0, &OptionError{Field: field, Value: v, Reason: fmt.Sprintf("must be at most %v", hi)}
	}
	return v, nil
}
