package recordlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The cluster half of a lock: a round from the coordinator, joined by the local handle
// (docs/DESIGN.md §8).

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
	cctx, cancel := context.WithCancelCause(ctx)
	budget := l.clock.AfterFunc(remaining, func() { cancel(ErrTimeout) })
	stopOnClose := context.AfterFunc(l.closing, func() { cancel(ErrClosed) })
	round, err := coord.Acquire(cctx, h.key(), r.Lease, h.RevokeLease)
	budget.Stop()
	stopOnClose()
	cause := context.Cause(cctx)
	cancel(nil)
	if err != nil {
		h.Release()
		return l.acquireError(ctx, err, cause)
	}
	if !h.join(round, r.Lease) {
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

// revokedLive reports whether h's lease was revoked before its deadline passed.
func revokedLive(h *Handle) bool {
	s := h.claim.Snapshot()
	return s.Expired() && s.Remaining > 0
}

// acquireError is the error of a failed Coordinator.Acquire, given why its ctx was cancelled.
func (l *Locker) acquireError(ctx context.Context, err, cause error) error {
	canceled := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	switch {
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
