package etcdcoord

import (
	"context"
	"errors"
	"fmt"

	"github.com/recordlock/recordlock"
)

// ErrNameTaken is returned by New, and by Acquire after the node's lease was lost, when
// another live coordinator has registered the same node name.
var ErrNameTaken = errors.New("etcdcoord: the node name is live in the cluster")

// requestErr maps a failed etcd request. A caller who cancelled gets their ctx error back. A
// request cut short because the caller's wait ran out (its Timeout or ctx deadline) is
// ErrTimeout once the call has waited for holders of the key, on another node or in this
// node's recall (contended): the wait was for them, whatever request was in flight when it ran
// out. Anything else is ErrClusterUnavailable, with the caller's deadline error if that was
// what ran out: etcd took the whole wait.
func requestErr(ctx context.Context, what string, err error, contended bool) error {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, context.Canceled):
		return fmt.Errorf("etcdcoord: %s: %w", what, ctx.Err())
	case contended && (errors.Is(cause, recordlock.ErrTimeout) || errors.Is(cause, context.DeadlineExceeded)):
		return waitErr(ctx, "the wait ran out during a request to "+what)
	case errors.Is(cause, context.DeadlineExceeded):
		return fmt.Errorf("%w: etcdcoord: %s: %w", recordlock.ErrClusterUnavailable, what, cause)
	case cause != nil:
		return fmt.Errorf("%w: etcdcoord: %s: etcd did not answer in time", recordlock.ErrClusterUnavailable, what)
	}
	return fmt.Errorf("%w: etcdcoord: %s: %w", recordlock.ErrClusterUnavailable, what, err)
}

// waitErr is the error of a wait for another node that ctx ended: ErrTimeout when the wait ran
// out, ctx's error when the caller cancelled.
func waitErr(ctx context.Context, what string) error {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, context.Canceled):
		return fmt.Errorf("etcdcoord: %s: %w", what, ctx.Err())
	case errors.Is(cause, recordlock.ErrTimeout):
		return fmt.Errorf("%w: etcdcoord: %s", recordlock.ErrTimeout, what)
	default:
		return fmt.Errorf("%w: etcdcoord: %s: %w", recordlock.ErrTimeout, what, cause)
	}
}
