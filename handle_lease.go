package recordlock

import (
	"time"

	"github.com/recordlock/recordlock/internal/locktable"
)

// Moving a live lease's deadline: joining a cluster round, switching to an exclusive one,
// holding the local key through a round request, UpgradeToHold and Renew. The table keeps the
// round and checks every move (locktable.Claim.JoinRound, SwitchRound, Extend).

// JoinClusterRound re-anchors the handle to a granted cluster round. It returns false, changing
// nothing, if the handle no longer authorizes writes, if the round's lease, measured from
// mintedMono on this handle's clock, is already over, or if lease is longer than the lease the
// handle was locked with (or last renewed or extended to with UpgradeToHold, as asked, before any
// clamp): a round never grants more than the lock asked for. Otherwise AcquiredAt and ClusterTsR
// become tsR, the version counter restarts, the deadline becomes exactly mintedMono+lease,
// ExpiresAt becomes tsR+lease, and onRelease becomes the release hook. The Locker joins a lock of
// cluster scope to its round the same way, and also records the round's fencing token (Token);
// see Writing a coordinator in the package documentation.
func (h *Handle) JoinClusterRound(tsR Timestamp, lease time.Duration, mintedMono time.Duration, onRelease func() error) bool {
	return h.claim.JoinRound(locktable.Round{TsR: int64(tsR), MintedMono: mintedMono, Lease: lease, Hook: onRelease})
}

// joinCoordinated joins round, a round of the database's Coordinator, and records its fencing
// token; a Txn's upgrade of the handle then asks the Coordinator for an exclusive round.
func (h *Handle) joinCoordinated(round Round, lease time.Duration) bool {
	return h.claim.JoinRound(locktable.Round{
		TsR: int64(round.TsR), Token: round.Token, MintedMono: round.MintedMono, Lease: lease, Hook: round.Release,
		Coordinated: true,
	})
}

// coordinated reports whether h's round came from the database's Coordinator.
func (h *Handle) coordinated() bool { return h.claim.Snapshot().Coordinated }

// switchRound moves h, a cluster-scoped lock a Txn has just made exclusive in the table, from its
// shared round to round, an exclusive round of the same record asked for what was left of h's
// lease (docs/DESIGN.md §8.5). Token and the release hook become round's, and the deadline moves
// only earlier: the handle keeps its lease, AcquiredAt, ClusterTsR and versions. It returns false,
// changing nothing, if h no longer authorizes writes or round's lease is already over. On success
// the shared round's release is the caller's: run it (Replaced) or put it back (Revert).
func (h *Handle) switchRound(round Round, lease time.Duration) (locktable.RoundSwitch, bool) {
	return h.claim.SwitchRound(locktable.Round{
		TsR: int64(round.TsR), Token: round.Token, MintedMono: round.MintedMono, Lease: lease, Hook: round.Release,
	})
}

// holdThrough moves a live holder's deadline to deadline, for the Locker to keep the local key
// while a cluster round is requested. It reports false, changing nothing, when h is dead.
func (h *Handle) holdThrough(deadline time.Duration) bool { return h.claim.AwaitRound(deadline) }

// UpgradeToHold makes the lock outlive its Txn, with a new lease from now (0 means
// DefaultLease). Under a cluster round the new deadline is clamped to the round's: a granted
// round is never extended locally. It then advances the version counter once. It returns an
// *OptionError for an invalid lease, and ErrReleased or ErrLeaseExpired for a dead handle; on
// failure nothing changes.
func (h *Handle) UpgradeToHold(lease time.Duration) error {
	_, err := h.extend(lease, true)
	return err
}

// Renew sets the lease to run lease from now (0 means DefaultLease), which shortens it when lease
// is less than was left. Unlike UpgradeToHold it leaves Hold and the version counter alone, so a
// lock of a Txn still ends with the Txn. Under a cluster round the new deadline is clamped to the
// round's, as in UpgradeToHold. It returns an *OptionError for an invalid lease, and ErrReleased
// or ErrLeaseExpired for a dead handle; on failure nothing changes.
func (h *Handle) Renew(lease time.Duration) error {
	_, err := h.extend(lease, false)
	return err
}

// extend is Renew, and with hold UpgradeToHold. On success it returns what puts back the state
// it replaced, for a LockAll that fails to undo the Hold extensions it made.
func (h *Handle) extend(lease time.Duration, hold bool) (locktable.Undo, error) {
	lease, err := resolveDuration("Lease", lease, DefaultLease, MinLease, MaxLease)
	if err != nil {
		return locktable.Undo{}, err
	}
	u, err := h.claim.Extend(lease, hold)
	if err != nil {
		return u, deadError(err)
	}
	return u, nil
}

// deadError is the API's error for a dead claim's locktable.ErrReleased or ErrLeaseExpired.
func deadError(err error) error {
	if err == locktable.ErrReleased {
		return ErrReleased
	}
	return ErrLeaseExpired
}
