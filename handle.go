package recordlock

import (
	"time"

	"github.com/recordlock/recordlock/internal/locktable"
)

// Handle is one holder's authority over one key, or over the keys of a Range, bounded by a lease
// that runs on the monotonic clock of the Locker that issued it. Its methods are safe for
// concurrent use.
//
// A Handle stops authorizing writes when it is released, when its lease lapses, or when it is
// revoked; Done is closed at that moment. See the package documentation for the difference
// between IsExpired and IsLeaseExpired.
type Handle struct {
	// claim is the table's record of the lock; the table guards it, and every method below asks
	// the table through one of its operations.
	claim locktable.Claim
}

func (h *Handle) status() locktable.Status { return h.claim.Status() }

// dead reports whether the handle was released or its lease ended, as far as its status knows: a
// lapse that nothing has settled yet is not in it.
func (h *Handle) dead() bool { return h.status().Dead() }

// released reports whether the handle was given back deliberately: by a Release that returned
// true, or by Close, which releases the same way. A lease that ended first leaves it false.
func (h *Handle) released() bool { return h.status().Released() }

// Key returns the locked key, or a range lock's Start (see Range). The caller must not modify it.
func (h *Handle) Key() []byte { return h.key() }

func (h *Handle) key() []byte {
	_, key, _ := h.claim.Record()
	return key
}

// cf is the ID of the locked key's column family.
func (h *Handle) cf() uint32 {
	cf, _, _ := h.claim.Record()
	return cf
}

// Every valid lease is recorded exactly as the lease asked for (locktable.MaxAskedLease): this
// conversion does not compile otherwise.
const _ = uint(locktable.MaxAskedLease - MaxLease)

// ColumnFamilyID returns the ID of the locked key's column family; 0 is the default one.
func (h *Handle) ColumnFamilyID() uint32 { return h.cf() }

// txn is the Txn the handle was taken by, nil for none.
func (h *Handle) txn() *Txn {
	t, _ := h.claim.Owner().(*Txn)
	return t
}

// Scope returns the resolved scope: ScopeCluster once a cluster round was joined, else ScopeNode.
func (h *Handle) Scope() Scope {
	if h.status().Cluster() {
		return ScopeCluster
	}
	return ScopeNode
}

// Hold reports whether the lock outlives the Txn that took it.
func (h *Handle) Hold() bool { return h.status().Hold() }

// Shared reports whether the lock is shared (Options.Shared): other shared holders may hold the
// record at the same time. A handle a Txn upgraded to exclusive reports false.
func (h *Handle) Shared() bool { return h.status().Shared() }

// AcquiredAt is the timestamp minted when the key was taken, or the round's TsR under a round.
func (h *Handle) AcquiredAt() Timestamp { return Timestamp(h.claim.Snapshot().AcquiredAt) }

// ExpiresAt is the wall-clock time the lease ends, for display: enforcement uses the monotonic
// deadline, which a wall-clock step cannot move.
func (h *Handle) ExpiresAt() time.Time { return time.Unix(0, h.claim.Snapshot().ExpiresAt) }

// ClusterTsR returns the granted round's timestamp; false while the handle is node-scoped. A Txn's
// upgrade to an exclusive round keeps it, as it keeps AcquiredAt.
func (h *Handle) ClusterTsR() (Timestamp, bool) {
	s := h.claim.Snapshot()
	return Timestamp(s.TsR), s.HasTsR
}

// Token returns the round's fencing token: 0 when node-scoped or when the coordinator has none.
func (h *Handle) Token() uint64 { return h.claim.Snapshot().Token }

// Done returns a channel that is closed as soon as the handle stops authorizing writes: release,
// lease lapse or revocation. A closed Done does not yet mean the key is free when the lease ended
// inside Fence: the key passes on when the commit returns.
func (h *Handle) Done() <-chan struct{} { return h.claim.Done() }

// IsExpired reports whether the handle can no longer authorize a new write, evaluated now:
// released, revoked, or past its deadline. Finding the deadline passed, it completes the expiry
// (gives the key back and fires the release hook) before it returns true.
func (h *Handle) IsExpired() bool { return h.claim.Now().Dead() }

// IsLeaseExpired reports whether the lease has ended, by lapse or revocation. A deliberate
// Release alone does not make it true, so a write staged before Release stays valid until the
// deadline; once the deadline passes it is true for good.
func (h *Handle) IsLeaseExpired() bool { return h.claim.Now().Expired() }

// Release gives the key back. It returns true the first time; false when the handle was already
// released, expired or revoked, or is past its deadline (it then completes the expiry). If another
// goroutine is inside Fence on this handle, Release waits for its commit to return; called from
// inside the commit of a Fence (this handle's, or any other's), it does not wait for it, and the
// key passes on when that commit returns.
func (h *Handle) Release() bool { return h.claim.Release() }

// RevokeLease ends the handle's authority ahead of its lease, so IsLeaseExpired becomes true and
// a write staged through it is fenced. If the key is still held it is given back and the release
// hook fires; after a Release it only settles the flag. It waits for a Fence running in another
// goroutine, so once it returns no fenced write through this handle is in flight. Called from
// inside the commit of a Fence (this handle's, or any other's), it does not wait for it, and the
// key passes on when that commit returns. Idempotent.
func (h *Handle) RevokeLease() { h.claim.Revoke() }

// Fence runs commit only while the lease is live and keeps the key from passing to another
// holder until commit returns. It returns ErrLeaseExpired without calling commit when
// IsLeaseExpired is true, and otherwise commit's error. If the lease ends while commit runs, Done
// closes at once and the key passes on when commit returns. commit may call the handle's
// accessors and predicates. It should not call Release, RevokeLease or Fence on the same handle:
// a Release or RevokeLease it calls takes effect at once (the handle stops authorizing writes and
// Done closes) but the key passes on only when commit returns, and a nested Fence panics. Go
// gives a goroutine no public identity, so a call cannot tell this commit from another Fence's:
// called from inside any Fence's commit while this one runs, Release and RevokeLease do not wait
// for it either, and Fence panics (docs/DESIGN.md §5.1).
// Fence after Release still runs while the lease lasts, but then a successor may hold the key;
// once the Locker is closed it returns ErrClosed without calling commit.
func (h *Handle) Fence(commit func() error) error {
	return panicInOwnFence(h.claim.Fence(commit), fenceInOwnFence)
}

// fenceTxn is Fence for Txn.Commit, whose commit is the Txn's write: it runs no user code.
func (h *Handle) fenceTxn(commit func() error) error {
	return panicInOwnFence(h.claim.FenceTrusted(commit), txnCommitInOwnFence)
}

// fenceThenRelease is fenceTxn followed, unless the lock is held (Hold), by Release in the
// critical section that ends the fence: one mutex round trip and two clock reads fewer than the
// two calls, for Txn.Commit, whose locks without Hold end with it.
func (h *Handle) fenceThenRelease(commit func() error) error {
	return panicInOwnFence(h.claim.FenceTrustedThenRelease(commit), txnCommitInOwnFence)
}

// The panics of a fence called by the commit of a Fence on a handle with a Fence running, which
// it could be waiting for: a nested Fence, and a Txn.Commit that would fence one of its handles
// again.
const (
	fenceInOwnFence     = "recordlock: Fence called inside the commit of a Fence on the same handle, or on a handle whose Fence another goroutine runs"
	txnCommitInOwnFence = "recordlock: Txn.Commit called inside the commit of a Fence on one of its handles, or on a handle whose Fence another goroutine runs"
)

// panicInOwnFence returns err, a fence's outcome (commit's own error, or the table's ErrClosed or
// ErrLeaseExpired, which are the API's), and panics with misuse instead when the table refused a
// fence whose caller is the commit of a fence on the same handle, rather than wait for itself
// (docs/DESIGN.md §5.1).
func panicInOwnFence(err error, misuse string) error {
	if err == locktable.ErrFenceInOwnFence {
		panic(misuse)
	}
	return err
}

// disown ends the handle's ownership by its Txn, when the Txn ends: a lock without Hold is
// released first, and with release any live lock is.
func (h *Handle) disown(release bool) { h.claim.Disown(release) }

// Lock-ordered version stamps of a holder's writes (docs/DESIGN.md §9), for databases that
// version their records: see Version stamps in the package documentation. The table keeps them
// (locktable.Claim.VersionCandidate, NextVersion, RaiseVersionFloor, NoteVersion).

// HolderVersionCandidate returns the version the next holder write would get, at least floor,
// without recording it: max(last issued + 1, or AcquiredAt if none; AcquiredAt; the candidate
// floor; floor). See Version stamps in the package documentation.
func (h *Handle) HolderVersionCandidate(floor Timestamp) Timestamp {
	return Timestamp(h.claim.VersionCandidate(int64(floor)))
}

// NextHolderVersion returns the candidate version and records it as issued. See Version stamps in
// the package documentation.
func (h *Handle) NextHolderVersion() Timestamp {
	return Timestamp(h.claim.NextVersion())
}

// NoteCandidateFloor raises the floor of later candidates without counting as a write. See
// Version stamps in the package documentation.
func (h *Handle) NoteCandidateFloor(v Timestamp) { h.claim.RaiseVersionFloor(int64(v)) }

// NoteHolderVersion records v as issued if it is above the last issued version; it never lowers
// it. See Version stamps in the package documentation.
func (h *Handle) NoteHolderVersion(v Timestamp) { h.claim.NoteVersion(int64(v)) }
