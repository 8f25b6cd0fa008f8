package recordlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/linxGnu/grocksdb"
)

// LockAll locks every key of keys for this Txn, taking them in bytewise key order whatever order
// they are given in, so that Txns that lock their records with LockAll never wait for each other
// in a cycle. A key given twice is locked once. Keys this Txn already holds are re-entrant, as in
// Lock (with opts.Hold they are upgraded once every other key is locked).
//
// opts.Timeout bounds the whole call, not each key: LockAll fails with ErrTimeout once it has
// waited that long in all. It fails with an error matching ctx's error once ctx is done, and
// with an error matching ErrDeadlock if waiting for a key would close a cycle of Txns (possible
// only with Txns that lock in another order). It is all or nothing: on any failure the locks
// this call took are released, the locks the Txn held before stay, and nil is returned. Invalid
// options, an empty key or a scope conflict fail before anything is locked.
//
// On success the handles come back in the order of keys; a key given twice gets the same handle
// at both places.
func (t *Txn) LockAll(ctx context.Context, opts Options, keys ...[]byte) ([]*Handle, error) {
	return t.lockAll(ctx, 0, opts, keys)
}

// LockAllCF is LockAll of keys in column family cf (nil: the default column family).
func (t *Txn) LockAllCF(ctx context.Context, cf *grocksdb.ColumnFamilyHandle, opts Options, keys ...[]byte) ([]*Handle, error) {
	return t.lockAll(ctx, columnFamilyID(cf), opts, keys)
}

func (t *Txn) lockAll(ctx context.Context, cf uint32, opts Options, keys [][]byte) ([]*Handle, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	r, err := t.l.opts.resolve(opts)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if len(k) == 0 {
			return nil, ErrInvalidKey
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := lockAllCall{t: t, cf: cf, ctx: ctx, opts: opts, end: t.l.clock.Mono() + r.Timeout}
	defer c.stop()
	c.cluster = t.wantsCluster(r)

	// order lists the positions of keys sorted by key; equal keys are adjacent, the first of
	// each run stands for the run.
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return bytes.Compare(keys[i], keys[j]) })
	out := make([]*Handle, len(keys))
	first := func(n int) bool { return n == 0 || !bytes.Equal(keys[order[n-1]], keys[order[n]]) }

	// Keys this Txn holds first: a scope conflict must fail before anything is locked.
	var reentrant []*Handle
	for n, i := range order {
		if !first(n) {
			continue
		}
		if cur, ok := t.locks.latest(cf, keys[i]); ok {
			h, err := t.reusable(ctx, cur.h, keys[i], opts)
			if err != nil {
				return nil, err
			}
			if h != nil {
				out[i] = h
				reentrant = append(reentrant, h)
			}
		}
	}
	var taken []*Handle
	fail := func(err error) ([]*Handle, error) {
		for _, h := range taken {
			h.Release()
			h.disown()
		}
		return nil, err
	}
	for n, i := range order {
		if !first(n) || out[i] != nil {
			continue
		}
		h, err := c.take(keys[i])
		if err != nil {
			return fail(err)
		}
		out[i] = h
		taken = append(taken, h)
	}
	if opts.Hold {
		for _, h := range reentrant {
			if err := h.UpgradeToHold(opts.Lease); err != nil {
				return fail(err)
			}
		}
	}
	for n, i := range order {
		if !first(n) {
			out[i] = out[order[n-1]]
		}
	}
	for _, h := range taken {
		t.locks.add(txnLock{h: h})
	}
	return out, nil
}

// lockAllCall is one LockAll's shared wait budget.
type lockAllCall struct {
	t       *Txn
	cf      uint32
	ctx     context.Context
	opts    Options
	end     time.Duration // the Mono at which the call's Timeout runs out
	cluster bool          // the locks are cluster-scoped (or fail closed asking to be)
	// budget is ctx cancelled with cause ErrTimeout at end, made when a key first must wait.
	budget context.Context
	cancel context.CancelCauseFunc
	timer  Timer
}

// take locks key with what is left of the call's Timeout. Each key's own Lock also gets the
// whole Timeout, which always ends later than the call's: the budget's ctx is what bounds the
// call, so keys freed one after another, each in time for its own Lock, still time out once.
func (c *lockAllCall) take(key []byte) (*Handle, error) {
	l := c.t.l
	req := lockRequest{cf: c.cf, key: key, owner: c.t}
	if !c.cluster && c.budget == nil {
		// A free key is taken without waiting, so an uncontended LockAll arms no timer. Once
		// the budget is armed every key goes through it, so none is taken after it ran out.
		h, err := l.lock(c.ctx, req, c.opts)
		if !errors.Is(err, ErrLocked) {
			return h, err
		}
	}
	if c.budget == nil {
		left := c.end - l.clock.Mono()
		if left <= 0 {
			return nil, c.timedOut()
		}
		c.budget, c.cancel = context.WithCancelCause(c.ctx)
		c.timer = l.clock.AfterFunc(left, func() { c.cancel(ErrTimeout) })
	}
	req.wait = true
	h, err := l.lock(c.budget, req, c.opts)
	if err != nil && c.ctx.Err() == nil && context.Cause(c.budget) == ErrTimeout &&
		(errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout)) {
		return nil, c.timedOut()
	}
	return h, err
}

func (c *lockAllCall) timedOut() error {
	return fmt.Errorf("%w: LockAll's Timeout ran out", ErrTimeout)
}

// stop disarms the budget, if one was made.
func (c *lockAllCall) stop() {
	if c.budget != nil {
		c.timer.Stop()
		c.cancel(nil)
	}
}
