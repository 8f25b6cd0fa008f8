package recordlock

import (
	"bytes"
	"context"

	"github.com/linxGnu/grocksdb"
)

// Range locks (docs/DESIGN.md §16.1): a lock of every key of a Range, present or not, which
// conflicts with each lock of a key or range it shares a key with, unless both are shared. A range
// lock is a Handle like any other; only the key-lock table tells the two apart.

// LockRange waits until no lock conflicts with r in the default column family and locks every key
// of r, whether or not the database has it: an exclusive range lock excludes every other lock of a
// key or range that shares a key with r, and a shared one (opts.Shared) excludes the exclusive
// ones. Requests are served in arrival order among those that conflict, and never wait for one
// they do not conflict with. The handle is a Handle in every respect (lease, Timeout and ctx, Hold,
// Shared, Done, release hook, Release, Renew, RevokeLease, Fence, version stamps); its Range
// reports r, and its Key is r.Start. The caller may reuse r's slices once LockRange returns.
//
// Range locks are node-scoped: the default scope resolves to node scope, even on a database with a
// coordinator, and opts.Scope set to ScopeCluster fails with an *OptionError matching
// ErrInvalidOptions. On failure LockRange returns a nil handle and leaves nothing locked or
// queued. The error is:
//   - before anything is locked: an error matching ErrInvalidKey for an invalid r (an End that is
//     not nil and not after Start), an *OptionError matching ErrInvalidOptions for ScopeCluster
//     or other invalid opts, an error matching ErrInvalidOptions for a nil ctx, and ErrClosed
//     once the Locker is closed;
//   - ErrTimeout once opts.Timeout has passed on the Locker's clock;
//   - an error matching ctx's error once ctx is done (at once if it already is);
//   - ErrClosed when the Locker is closed while LockRange waits;
//   - an error matching ErrTooManyLocks, at once, at the bound of WithMaxLocks.
func (l *Locker) LockRange(ctx context.Context, r Range, opts Options) (*Handle, error) {
	return l.lockRange(ctx, 0, r, opts, true)
}

// LockRangeCF is LockRange of r in column family cf (nil: the default column family). A cf that
// cannot be a family of the Locker's database fails, before anything is locked, with an error
// matching ErrInvalidOptions.
func (l *Locker) LockRangeCF(ctx context.Context, cf *grocksdb.ColumnFamilyHandle, r Range, opts Options) (*Handle, error) {
	id, err := l.columnFamily(cf)
	if err != nil {
		return nil, err
	}
	return l.lockRange(ctx, id, r, opts, true)
}

// TryLockRange locks r if LockRange would not have to wait, and fails with ErrLocked at once if
// it would. Like LockRange it fails before anything is locked with ErrInvalidKey for an invalid
// r, an *OptionError matching ErrInvalidOptions for ScopeCluster or other invalid opts,
// ErrClosed once the Locker is closed, and ErrTooManyLocks at the bound of WithMaxLocks. On
// failure it returns a nil handle.
func (l *Locker) TryLockRange(r Range, opts Options) (*Handle, error) {
	return l.lockRange(context.Background(), 0, r, opts, false)
}

// TryLockRangeCF is TryLockRange of r in column family cf (nil: the default column family). A cf
// that cannot be a family of the Locker's database fails as in LockRangeCF, with an error
// matching ErrInvalidOptions.
func (l *Locker) TryLockRangeCF(cf *grocksdb.ColumnFamilyHandle, r Range, opts Options) (*Handle, error) {
	id, err := l.columnFamily(cf)
	if err != nil {
		return nil, err
	}
	return l.lockRange(context.Background(), id, r, opts, false)
}

// lockRange is every range lock call: it checks r and the scope, and locks through the path of a
// key lock (Locker.lock), which validates the other options and ctx in the same order.
func (l *Locker) lockRange(ctx context.Context, cf uint32, r Range, opts Options, wait bool) (*Handle, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	opts, err := rangeOptions(opts)
	if err != nil {
		return nil, err
	}
	return l.lock(ctx, lockRequest{cf: cf, key: r.Start, rng: &r, wait: wait}, &opts)
}

// rangeOptions returns opts as a range lock runs them: node scope, which the default scope means
// for a range. ScopeCluster is an *OptionError; an unknown scope is left for Resolve to refuse.
func rangeOptions(opts Options) (Options, error) {
	switch opts.Scope {
	case ScopeCluster:
		return opts, &OptionError{Field: "Scope", Value: opts.Scope, Reason: "must not be ScopeCluster for a range lock (range locks are node-scoped)"}
	case ScopeDefault:
		opts.Scope = ScopeNode
	}
	return opts, nil
}

// Range returns a copy of the range a range lock locks, and true; for a lock of one key, the zero
// Range and false. An empty Start comes back nil, as Prefix(nil) has it.
func (h *Handle) Range() (Range, bool) {
	if !h.status().Range() {
		return Range{}, false
	}
	var r Range
	_, start, end := h.claim.Record()
	if len(start) > 0 {
		r.Start = bytes.Clone(start)
	}
	r.End = bytes.Clone(end) // nil stays nil: no bound
	return r, true
}
