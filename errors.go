package recordlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/recordlock/recordlock/internal/locktable"
)

// Sentinel errors, matched with errors.Is. Errors that come from RocksDB are returned wrapped, so
// errors.Is still finds their cause; a ctx's error is returned as it is, or wrapped when a
// coordinator's round ended with it. ErrLocked, ErrTimeout, ErrLeaseExpired, ErrReleased and
// ErrClosed are the key-lock table's own values, so its refusals need no translation.
var (
	// ErrInvalidOptions: an Options field or Locker option is out of range; nothing was locked.
	ErrInvalidOptions = errors.New("recordlock: invalid options")
	// ErrInvalidKey: the key is nil, empty or longer than 2 GiB, or a Range's End is not after its
	// Start; nothing was locked or staged.
	ErrInvalidKey = errors.New("recordlock: invalid key: a key must be non-empty and at most 2 GiB")
	// ErrLocked: TryLock found the key held or waited on.
	ErrLocked = locktable.ErrLocked
	// ErrTimeout: the key stayed busy for the whole Options.Timeout.
	ErrTimeout = locktable.ErrTimeout
	// ErrLeaseExpired: the lease lapsed or was revoked, so the handle no longer authorizes writes.
	ErrLeaseExpired = locktable.ErrLeaseExpired
	// ErrReleased: the handle was released deliberately and authorizes no new writes.
	ErrReleased = locktable.ErrReleased
	// ErrClusterUnavailable: a cluster-scoped lock could not be granted by the coordinator.
	ErrClusterUnavailable = errors.New("recordlock: cluster coordination unavailable")
	// ErrScopeConflict: a Txn asked for cluster scope on a key it already holds node-scoped.
	ErrScopeConflict = errors.New("recordlock: scope conflicts with the lock already held")
	// ErrClosed: the Locker was closed.
	ErrClosed = locktable.ErrClosed
	// ErrTxnDone: the Txn was already committed or rolled back.
	ErrTxnDone = errors.New("recordlock: transaction already committed or rolled back")
	// ErrDeadlock: waiting for the key would close a cycle of Txns waiting for each other; the
	// request queued nothing and the Txn keeps its other locks. Roll back and retry.
	ErrDeadlock = errors.New("recordlock: deadlock")
	// ErrNotLocked: a Txn wrote a key it never locked (see TxnOptions.AllowUnlockedWrites), or
	// holds only shared.
	ErrNotLocked = errors.New("recordlock: key not locked by this transaction")
	// ErrNoSavePoint: RollbackToSavePoint found no savepoint to roll back to; nothing changed.
	ErrNoSavePoint = errors.New("recordlock: no savepoint")
	// ErrCommitAmbiguous: RocksDB failed the Commit's write after it may have logged or applied
	// some or all of the batch, now or once the database is reopened, so read before retrying.
	ErrCommitAmbiguous = errors.New("recordlock: commit outcome unknown: the batch may have landed")
	// ErrTooManyLocks: the lock would take the Locker past its WithMaxLocks bound; nothing was
	// locked or queued.
	ErrTooManyLocks = errors.New("recordlock: too many locks")
)

// maxKeyLen is the longest key a lock takes; a Handle stores the length in 32 bits.
const maxKeyLen = math.MaxInt32

// OptionError describes one rejected option. It matches ErrInvalidOptions.
type OptionError struct {
	Field  string // the option's name, e.g. "Lease"
	Value  any    // the rejected value
	Reason string // what the value must be, e.g. "must be at least 100ms"
	txn    bool   // Field is one of TxnOptions, not of Options
	locker bool   // Field is an Option of New, not of Options
}

func (e *OptionError) Error() string {
	kind := "lock option"
	switch {
	case e.txn:
		kind = "txn option"
	case e.locker:
		kind = "Locker option"
	}
	return fmt.Sprintf("recordlock: %s %s %s, got %v", kind, e.Field, e.Reason, e.Value)
}

// Is makes errors.Is(err, ErrInvalidOptions) true for every *OptionError.
func (e *OptionError) Is(target error) bool { return target == ErrInvalidOptions }

// DeadlockError names the cycle of Txns that a lock request would have closed. It matches
// ErrDeadlock.
type DeadlockError struct {
	// Cycle lists the Txns of the cycle, starting with the one whose request failed: each waits
	// for the next, which holds the record it waits for in a conflicting mode or, for a shared
	// request, has the nearest exclusive request of a Txn queued ahead of it, or holds the record
	// at all when an exclusive request outside any Txn is queued ahead of it; the last waits for
	// the first.
	Cycle []DeadlockWait
}

// DeadlockWait is one Txn of a deadlock cycle and the record it waits for.
type DeadlockWait struct {
	Txn string // the Txn's TxnOptions.Name, or "" when it has none
	// Node is the coordinator's name for the Txn's node in a cycle across nodes, "" in a cycle
	// found within one node.
	Node           string
	ColumnFamily   string // the name of the record's column family
	ColumnFamilyID uint32 // its ID in this node's database; 0 for a record of another node
	Key            []byte
}

func (e *DeadlockError) Error() string {
	var b strings.Builder
	b.WriteString("recordlock: deadlock: ")
	for i, w := range e.Cycle {
		if i > 0 {
			b.WriteString(" → ")
		}
		name := w.Txn
		if name == "" {
			name = "unnamed txn"
		}
		if w.Node != "" {
			name += " on " + w.Node
		}
		fmt.Fprintf(&b, "%s waits for %q", name, w.Key)
		switch {
		case w.ColumnFamily != "" && w.ColumnFamily != "default":
			fmt.Fprintf(&b, " (cf %s)", w.ColumnFamily)
		case w.ColumnFamily == "" && w.ColumnFamilyID != 0:
			fmt.Fprintf(&b, " (cf %d)", w.ColumnFamilyID)
		}
	}
	return b.String()
}

// Is makes errors.Is(err, ErrDeadlock) true for every *DeadlockError.
func (e *DeadlockError) Is(target error) bool { return target == ErrDeadlock }

// rangeError is an invalid Range. It says what is wrong with the range rather than with a key,
// and matches ErrInvalidKey.
type rangeError struct{ reason string }

func (e *rangeError) Error() string        { return "recordlock: invalid range: " + e.reason }
func (e *rangeError) Is(target error) bool { return target == ErrInvalidKey }

// fromTable returns a refusal of the table as the API's error. The sentinels are the table's
// own, and ctx errors come back as they are; only a deadlock changes: its cycle is named with
// the Txns' names, and its debug record is logged.
func (l *Locker) fromTable(h *Handle, err error) error {
	var d *locktable.DeadlockError
	if !errors.As(err, &d) {
		return err
	}
	de := &DeadlockError{Cycle: make([]DeadlockWait, len(d.Cycle))}
	for i, w := range d.Cycle {
		de.Cycle[i] = DeadlockWait{Txn: w.Owner.Name(), ColumnFamily: l.state.families.name(w.CF), ColumnFamilyID: w.CF, Key: w.Key}
	}
	l.logDeadlock(h, de, d.Waiters, d.HolderAge) // outside every mutex: the logger is the user's
	return de
}

// logDeadlock writes a debug record of a deadlock found for h's request, with waiters the number of
// Lock calls queued for h's key and holderAge how long its holder had held it.
func (l *Locker) logDeadlock(h *Handle, err *DeadlockError, waiters int, holderAge time.Duration) {
	if !l.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	l.log.Debug("recordlock: deadlock", "db", l.path, "key", string(h.key()), "cf", h.cf(),
		"holder_age", holderAge, "waiters", waiters, "cycle", err.Error())
}

// The errors of input a call refuses before it locks or stages anything: keys and contexts.

// Each invalid key gets an error that says which rule it broke; all of them match ErrInvalidKey.
var (
	errNilKey   = fmt.Errorf("%w; got a nil key", ErrInvalidKey)
	errEmptyKey = fmt.Errorf("%w; got an empty key", ErrInvalidKey)
)

// invalidKey returns the error for a key that is nil, empty or longer than maxKeyLen: the
// caller has found it invalid.
func invalidKey(key []byte) error {
	switch {
	case key == nil:
		return errNilKey
	case len(key) == 0:
		return errEmptyKey
	default:
		return fmt.Errorf("%w; got a key of %d bytes", ErrInvalidKey, len(key))
	}
}

// errNilContext is what a call that takes a ctx returns for a nil one, as net/http's
// NewRequestWithContext does: a nil ctx is a bug of the caller's, reported before anything is
// locked or queued rather than as a nil-pointer panic.
var errNilContext = fmt.Errorf("%w: nil Context", ErrInvalidOptions)

// The bound of WithMaxLocks (docs/DESIGN.md §18): the table counts the Locker's locks and queued
// requests, and Locker.lock takes a request's room before the request reaches the table.

// tooManyLocks is the error of a request the Locker's bound refuses, naming the bound.
func (l *Locker) tooManyLocks() error {
	return fmt.Errorf("%w: this Locker keeps at most %d locks and requests", ErrTooManyLocks, l.ten.Bound())
}
