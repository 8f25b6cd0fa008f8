package locktable

import "time"

// What the API reads of a claim: its status, without a lock, and a snapshot of the rest, taken
// under the shard mutex.

// Status is a claim's state as its flags record it (Claim.Status, Claim.Now).
type Status uint32

// Status returns h's status, read without the shard mutex: a lapse that nothing has settled yet
// is not in it (see Now).
func (h *Claim) Status() Status { return Status(h.flags() & flagBits) }

// Released reports that the claim was given back deliberately: by a Release that returned true, or
// by the tenant's Close, which releases the same way. A lease that ended first leaves it false.
func (s Status) Released() bool { return s&Status(flagReleased) != 0 }

// Expired reports that the lease ended: lapsed or revoked.
func (s Status) Expired() bool { return s&Status(flagExpired) != 0 }

// Dead reports that the claim was released or its lease ended: it authorizes no new write.
func (s Status) Dead() bool { return s&Status(flagReleased|flagExpired) != 0 }

// Hold reports that the lock outlives its owner.
func (s Status) Hold() bool { return s&Status(flagHold) != 0 }

// Shared reports a shared lock, until an Upgrade.
func (s Status) Shared() bool { return s&Status(flagShared) != 0 }

// Cluster reports that the claim joined a cluster round.
func (s Status) Cluster() bool { return s&Status(flagCluster) != 0 }

// Range reports a range claim.
func (s Status) Range() bool { return s&Status(flagRange) != 0 }

// Snapshot is a claim's state read at once under the shard mutex (Claim.Snapshot, and the holders
// VisitHolders and VisitWaits show). Key and End are the claim's own: the reader must not modify
// them.
type Snapshot struct {
	Status
	CF       uint32
	Key, End []byte // the record's key (a range's start), and a range's end, nil for none
	Owner    Owner  // the owner that took the claim, until Disown; nil for none
	// AcquiredAt is the Timestamp minted when the key was granted, or the joined round's TsR.
	AcquiredAt int64
	// ExpiresAt is the wall-clock end of the lease, Unix nanoseconds, for display: enforcement
	// uses Deadline.
	ExpiresAt  int64
	Deadline   time.Duration // the Mono of the claim's clock at which the lease lapses
	Remaining  time.Duration // lease left on the claim's clock when read; 0 once it has lapsed
	AskedLease time.Duration // the lease taken, extended or renewed with, as asked: a round's cap
	// TsR and Token are the joined cluster round's timestamp and fencing token; HasTsR is false
	// before a round is joined. Coordinated is true while that round is one the Coordinator
	// granted, not one joined by hand.
	TsR         int64
	HasTsR      bool
	Coordinated bool
	Token       uint64
}

// Snapshot returns h's state, read under the shard mutex. It settles nothing: a lapse nothing has
// settled yet shows as a Remaining of 0.
func (h *Claim) Snapshot() Snapshot {
	sh := h.lockShard()
	s := h.snapshot()
	sh.mu.Unlock()
	return s
}

// snapshot is Snapshot with the shard mutex held.
func (h *Claim) snapshot() Snapshot {
	cf, key, end := h.Record()
	s := Snapshot{
		Status: h.Status(), CF: cf, Key: key, End: end, Owner: h.owner,
		AcquiredAt: h.acquiredAt, ExpiresAt: h.expiresAt, Deadline: h.dueAt(), AskedLease: h.askedLease(),
	}
	s.Remaining = max(0, s.Deadline-h.ten.clock.Mono())
	if g := h.ledgerIfAny(); g != nil {
		s.TsR, s.HasTsR, s.Coordinated, s.Token = g.tsR, g.hasTsR, g.coordinated, g.token
	}
	return s
}
