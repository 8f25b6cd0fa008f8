package recordlock

import (
	"time"

	"github.com/recordlock/recordlock/internal/locktable"
)

// Moving a live lease's deadline: joining a cluster round, holding the local key through a round
// request, UpgradeToHold and Renew.

// JoinClusterRound re-anchors the handle to a granted cluster round. It returns false, changing
// nothing, if the handle no longer authorizes writes, if the round's lease, measured from
// mintedMono on this handle's clock, is already over, or if lease is longer than the lease the
// handle was locked with (or last renewed or extended to with UpgradeToHold, as asked, before any clamp): a round
// never grants more than the lock asked for. Otherwise AcquiredAt and ClusterTsR become
// tsR, the version counter restarts, the deadline becomes exactly mintedMono+lease, ExpiresAt
// becomes tsR+lease, and onRelease becomes the release hook. The Locker joins a lock of cluster
// scope to its round the same way, through join, which also records the round's fencing token;
// see Writing a coordinator in the package documentation.
func (h *Handle) JoinClusterRound(tsR Timestamp, lease time.Duration, mintedMono time.Duration, onRelease func() error) bool {
	return h.join(Round{TsR: tsR, MintedMono: mintedMono, Release: onRelease}, lease)
}

// join is JoinClusterRound that also records the round's fencing token.
func (h *Handle) join(round Round, lease time.Duration) bool {
	hd := &h.hold
	hd.Lock()
	defer hd.Unlock()
	if hd.Dead() || hd.Settle() || lease > hd.AskedLease() {
		return false
	}
	end := monoAfter(round.MintedMono, lease)
	if end <= hd.Tenant().Clock().Mono() {
		return false
	}
	c := hd.Cold()
	c.TsR, c.HasTsR, c.Token = int64(round.TsR), true, round.Token
	c.RoundEnd = end
	c.RoundExpiresAt = int64(round.TsR) + int64(lease)
	c.Hook = round.Release
	hd.SetAcquiredAt(int64(round.TsR))
	hd.ClearFlags(flagHasVersion)
	hd.SetFlags(flagCluster)
	hd.SetExpiresAt(c.RoundExpiresAt)
	hd.MoveDeadline(c.RoundEnd)
	hd.Watch() // the release hook must fire at the round's deadline
	return true
}

// holdThrough moves a live holder's deadline to deadline, for the Locker to keep the local key
// while a cluster round is requested. It reports false, changing nothing, when h is dead.
func (h *Handle) holdThrough(deadline time.Duration) bool {
	hd := &h.hold
	hd.Lock()
	defer hd.Unlock()
	if hd.Dead() || hd.Settle() {
		return false
	}
	hd.MoveDeadline(deadline)
	return true
}

// UpgradeToHold makes the lock outlive its Txn, with a new lease from now (0 means
// DefaultLease). Under a cluster round the new deadline is clamped to the round's: a granted
// round is never extended locally. It then advances the version counter once. It returns an
// *OptionError for an invalid lease, and ErrReleased or ErrLeaseExpired for a dead handle; on
// failure nothing changes.
func (h *Handle) UpgradeToHold(lease time.Duration) error {
	_, err := h.extend(lease, true)
	return err
}

// Renew extends the lease: the new deadline is now plus lease (0 means DefaultLease). Unlike
// UpgradeToHold it leaves Hold and the version counter alone, so a lock of a Txn still ends with
// the Txn. Under a cluster round the new deadline is clamped to the round's, as in UpgradeToHold.
// It returns an *OptionError for an invalid lease, and ErrReleased or ErrLeaseExpired for a dead
// handle; on failure nothing changes.
func (h *Handle) Renew(lease time.Duration) error {
	_, err := h.extend(lease, false)
	return err
}

// leaseState is what extend changes on a handle, kept so that a LockAll that fails can undo
// the Hold extensions it made (undo).
type leaseState struct {
	h         *Handle
	deadline  time.Duration
	expiresAt int64
	asked     time.Duration // AskedLease
	flags     uint32        // flagHold and flagHasVersion as they were
	lastVer   int64
}

// extend is Renew, and with hold UpgradeToHold. On success it returns the state it replaced.
func (h *Handle) extend(lease time.Duration, hold bool) (leaseState, error) {
	lease, err := resolveDuration("Lease", lease, DefaultLease, MinLease, MaxLease)
	if err != nil {
		return leaseState{}, err
	}
	hd := &h.hold
	hd.Lock()
	defer hd.Unlock()
	if err := hd.DeadErr(); err != nil {
		return leaseState{}, deadError(err)
	}
	was := leaseState{h: h, deadline: hd.Deadline(), expiresAt: hd.ExpiresAt(), asked: hd.AskedLease(), flags: hd.Flags() & (flagHold | flagHasVersion)}
	c := hd.ColdIfAny()
	if c != nil {
		was.lastVer = c.LastVer
	}
	wall, now := locktable.ReadClock(hd.Tenant().Clock())
	deadline := monoAfter(now, lease)
	if hd.Flags()&flagCluster != 0 && c.RoundEnd <= deadline {
		// Clamped to the round: its deadline and its ExpiresAt, wall(tsR)+lease, even after an
		// earlier extension had shortened both.
		deadline = c.RoundEnd
		hd.SetExpiresAt(c.RoundExpiresAt)
	} else {
		hd.SetExpiresAt(wall + int64(lease))
	}
	hd.MoveDeadline(deadline)
	hd.SetAskedLease(lease)
	if hold {
		hd.SetFlags(flagHold)
		h.nextVersion()
	}
	return was, nil
}

// undo puts back the lease (and the lease asked for), ExpiresAt, Hold flag and version counter
// that extend replaced. A deadline put back that has already passed ends the lease now, as it
// would have without the extension.
func (s leaseState) undo() {
	hd := &s.h.hold
	hd.Lock()
	hd.SetExpiresAt(s.expiresAt)
	hd.SetAskedLease(s.asked)
	hd.ReplaceFlags(flagHold|flagHasVersion, s.flags)
	if c := hd.ColdIfAny(); c != nil {
		c.LastVer = s.lastVer
	}
	hd.MoveDeadline(s.deadline)
	if hd.Flags()&flagHeld != 0 {
		hd.Settle()
	}
	hd.Unlock()
}

// deadError is the API's error for a dead hold's locktable.ErrReleased or ErrLeaseExpired.
func deadError(err error) error {
	if err == locktable.ErrReleased {
		return ErrReleased
	}
	return ErrLeaseExpired
}
