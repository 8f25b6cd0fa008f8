package recordlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/recordlock/recordlock/internal/locktable"
)

// The cluster half of a lock: a round from the coordinator, joined by the local handle, and what
// the coordinator is told of the Txns that ask (docs/DESIGN.md §8, §13.1).

// joinCluster obtains a round for h's key from coord with what is left of the wait, and joins
// it. On any failure the local key goes back. Close calls off a request in flight.
func (l *Locker) joinCluster(ctx context.Context, h *Handle, coord Coordinator, r Resolved, start time.Duration) error {
	waitEnd := monoAfter(start, r.Timeout)
	remaining := waitEnd - l.clock.Mono()
	if remaining <= 0 {
		h.Release()
		return ErrTimeout
	}
	// The local key must outlast the wait: if its lease lapsed while Acquire ran, another Lock of
	// this node could take the key and ask the cluster for it at the same time. No round granted
	// within the wait ends after start+Timeout+Lease; joining it sets the real deadline.
	if !h.holdThrough(monoAfter(waitEnd, r.Lease)) {
		return l.closedOr(ErrTimeout)
	}
	round, err := l.acquire(ctx, coord, Request{
		ColumnFamily: l.state.families.name(h.cf()),
		Key:          h.key(),
		Shared:       r.Shared,
		Lease:        r.Lease,
		Revoke:       h.RevokeLease,
		Txn:          l.state.txns.ref(h.txn()),
		Waits:        localWaits{l},
	}, remaining)
	if err != nil {
		h.Release()
		return err
	}
	if !h.joinCoordinated(round, r.Lease) {
		h.Release()
		if round.Release != nil {
			l.ten.RunHook(round.Release)
		}
		switch {
		case l.ten.Closed():
			return ErrClosed
		case revokedLive(h):
			return fmt.Errorf("%w: the admission was revoked before the round was joined", ErrClusterUnavailable)
		}
		return fmt.Errorf("%w: the round's lease lapsed before it was joined", ErrClusterUnavailable)
	}
	return nil
}

// acquire asks coord for the round req describes, with wait left of the caller's wait on l's
// clock, and calls the request off when Close begins. Its error is acquireError's.
func (l *Locker) acquire(ctx context.Context, coord Coordinator, req Request, wait time.Duration) (Round, error) {
	cctx, cancel := context.WithCancelCause(ctx)
	budget := l.clock.AfterFunc(wait, func() { cancel(ErrTimeout) })
	stopOnClose := context.AfterFunc(l.closing, func() { cancel(ErrClosed) })
	round, err := coord.Acquire(cctx, req)
	budget.Stop()
	stopOnClose()
	cause := context.Cause(cctx)
	cancel(nil)
	if err != nil {
		return Round{}, l.acquireError(ctx, err, cause)
	}
	return round, nil
}

// upgradeCoordinator is the coordinator through which a Txn's upgrade of a cluster-scoped share
// asks for its exclusive round: the database's, or ErrClusterUnavailable without one, whatever
// the scope the upgrade's options ask for, since the handle holds a cluster admission.
func (l *Locker) upgradeCoordinator() (Coordinator, error) {
	return l.state.coord.choose(&Resolved{Scope: ScopeCluster, ScopeRequested: true})
}

// exclusiveRound is the cluster half of a Txn's upgrade of h, a cluster-scoped share the table
// has just made exclusive (docs/DESIGN.md §8.5): it asks coord for an exclusive round of h's
// record for what is left of h's lease, within waitEnd on l's clock and ctx, and switches h to
// it. On success the shared round's release is the caller's, to run once the upgrade is kept
// (RoundSwitch.Replaced) or put back (Revert); h keeps its shared round until then, so the cluster
// never sees the record free between the two. On failure h is as it was and the error is
// joinCluster's: ErrTimeout, the ctx error, ErrClosed or ErrClusterUnavailable, and ErrReleased
// or ErrLeaseExpired when the share itself ended.
func (l *Locker) exclusiveRound(ctx context.Context, h *Handle, coord Coordinator, waitEnd time.Duration) (locktable.RoundSwitch, error) {
	remaining := waitEnd - l.clock.Mono()
	if remaining <= 0 {
		return locktable.RoundSwitch{}, fmt.Errorf("%w: the wait ran out before the cluster was asked for an exclusive round", ErrTimeout)
	}
	lease := h.claim.Snapshot().Remaining // never more: the upgrade keeps the lease
	if lease <= 0 || h.IsExpired() {
		return locktable.RoundSwitch{}, l.shareEnded(h)
	}
	round, err := l.acquire(ctx, coord, Request{
		ColumnFamily: l.state.families.name(h.cf()),
		Key:          h.key(),
		Lease:        lease,
		Revoke:       h.RevokeLease,
		Txn:          l.state.txns.ref(h.txn()),
		Waits:        localWaits{l},
	}, remaining)
	if err != nil {
		return locktable.RoundSwitch{}, err
	}
	sw, ok := h.switchRound(round, lease)
	if ok {
		return sw, nil
	}
	if round.Release != nil {
		l.ten.RunHook(round.Release)
	}
	if h.IsExpired() {
		return locktable.RoundSwitch{}, l.shareEnded(h)
	}
	return locktable.RoundSwitch{}, fmt.Errorf("%w: the exclusive round's lease lapsed before it was joined", ErrClusterUnavailable)
}

// shareEnded is the error of an upgrade whose share ended: ErrClosed once the Locker is closed,
// ErrReleased after a release, else ErrLeaseExpired.
func (l *Locker) shareEnded(h *Handle) error {
	switch {
	case l.ten.Closed():
		return ErrClosed
	case h.released():
		return fmt.Errorf("%w: the shared lock of %q was released during its upgrade", ErrReleased, h.key())
	}
	return fmt.Errorf("%w: the shared lock of %q ended during its upgrade", ErrLeaseExpired, h.key())
}

// revokedLive reports whether h's lease was revoked before its deadline passed.
func revokedLive(h *Handle) bool {
	s := h.claim.Snapshot()
	return s.Expired() && s.Remaining > 0
}

// acquireError is the error of a failed Coordinator.Acquire, given why its ctx was cancelled.
func (l *Locker) acquireError(ctx context.Context, err, cause error) error {
	canceled := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	switch {
	case errors.Is(err, ErrDeadlock):
		// The coordinator found a cycle through other nodes, and this request is its victim.
		l.state.clusterDeadlocks.Add(1)
		return err
	case errors.Is(err, ErrTimeout), errors.Is(err, ErrClusterUnavailable), errors.Is(err, ErrClosed):
		return err
	case cause == ErrClosed || l.ten.Closed():
		return ErrClosed
	case ctx.Err() != nil:
		return fmt.Errorf("recordlock: cluster round: %w", ctx.Err())
	case cause == ErrTimeout && canceled:
		// The coordinator gave up because the wait ran out: that is the caller's Timeout.
		return fmt.Errorf("%w: the cluster did not grant a round in time", ErrTimeout)
	}
	return fmt.Errorf("%w: %w", ErrClusterUnavailable, err)
}

// closedOr is ErrClosed once the Locker is closed, else err.
func (l *Locker) closedOr(err error) error {
	if l.ten.Closed() {
		return ErrClosed
	}
	return err
}

// Txn IDs, for deadlock detection across nodes (Request.Txn). A Txn gets one the first time a
// coordinator or a look at its waits needs it, and gives it back when it ends: most Txns never
// take one, and theirs cost one atomic load as they end.
type txnIDs struct {
	live  atomic.Int32 // len(byTxn), read as a Txn ends
	mu    sync.Mutex
	next  uint64
	byTxn map[*Txn]uint64
	byID  map[uint64]*Txn
}

// of returns t's ID, giving it one if it has none.
func (ids *txnIDs) of(t *Txn) uint64 {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if id, ok := ids.byTxn[t]; ok {
		return id
	}
	if ids.byTxn == nil {
		ids.byTxn, ids.byID = map[*Txn]uint64{}, map[uint64]*Txn{}
	}
	ids.next++
	ids.byTxn[t], ids.byID[ids.next] = ids.next, t
	ids.live.Store(int32(len(ids.byTxn)))
	return ids.next
}

// txn returns the live Txn with ID id, or nil.
func (ids *txnIDs) txn(id uint64) *Txn {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	return ids.byID[id]
}

// ended gives t's ID back, if it has one.
func (ids *txnIDs) ended(t *Txn) {
	if ids.live.Load() == 0 {
		return
	}
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if id, ok := ids.byTxn[t]; ok {
		delete(ids.byTxn, t)
		delete(ids.byID, id)
		ids.live.Store(int32(len(ids.byTxn)))
	}
}

// ref names t for a coordinator.
func (ids *txnIDs) ref(t *Txn) TxnRef {
	if t == nil {
		return TxnRef{}
	}
	return TxnRef{ID: ids.of(t), Name: t.name}
}

// localWaits is a database's LocalWaits.
type localWaits struct{ l *Locker }

func (w localWaits) WaitOf(id uint64) (LocalWait, bool) {
	l := w.l
	t := l.state.txns.txn(id)
	if t == nil {
		return LocalWait{}, false
	}
	wait, blockers, ok := l.tab.WaitOf(t)
	if !ok {
		return LocalWait{}, false
	}
	lw := LocalWait{ColumnFamily: l.state.families.name(wait.CF), Key: wait.Key, For: make([]TxnRef, 0, len(blockers))}
	for _, b := range blockers {
		if bt, ok := b.(*Txn); ok {
			lw.For = append(lw.For, l.state.txns.ref(bt))
		}
	}
	return lw, true
}
