package recordlock

import (
	"context"
	"fmt"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock/internal/locktable"
)

// A Txn's lock of one key: re-entry, a lock taken anew, and the upgrade of a shared lock, in the
// table and, for a share under a coordinator's round, in the cluster.

// Lock locks key for this Txn, as Locker.Lock does, and returns its handle. It is re-entrant: if
// the Txn already holds key with a live handle, that handle is returned without touching the
// key-lock table; with opts.Hold it is first upgraded (Handle.UpgradeToHold(opts.Lease)), which
// keeps its AcquiredAt. A handle that no longer authorizes writes is not reused: Lock takes the
// key anew, writes already staged stay with the old handle, and Commit checks the new one.
//
// A shared request (opts.Shared) for a key the Txn holds in either mode returns the handle it
// has. An exclusive request for a key the Txn holds shared upgrades that handle: it waits, ahead
// of every request queued for the key, until the Txn's share is the only one, and then the handle
// is exclusive with its lease and AcquiredAt unchanged; if the upgrade fails (timeout, ctx,
// deadlock) the handle is still shared and unchanged, and if the share itself ends meanwhile Lock
// fails with ErrLeaseExpired or ErrReleased. A share under a round of the database's coordinator
// is then upgraded in the cluster too (a round joined by hand with JoinClusterRound is the
// caller's, and stays as it is): the coordinator is asked for an exclusive round of the record
// (a Request with Shared false, the column family's name and the key) for what is left of the
// lease, within what is left of the wait. Once it is granted the handle's Token and release hook
// are the new round's, its deadline never moves later, and its shared round is given back; if it
// is not, the upgrade fails as a cluster Lock does (ErrTimeout, the ctx error,
// ErrClusterUnavailable) and the handle is still shared and unchanged, with its shared round.
//
// A key inside a range the Txn holds (Txn.LockRange) with a live handle, in a mode at least as
// strong as opts asks (an exclusive range serves both modes), needs no lock of its own: Lock
// returns the range's handle without touching the key-lock table, after the checks of a
// re-entrant Lock (ErrScopeConflict for cluster scope) and, with opts.Hold, its upgrade to Hold.
//
// It fails as Locker.Lock does (ErrTimeout, the ctx error, ErrInvalidOptions, ErrInvalidKey,
// ErrClosed, ErrTooManyLocks, and with cluster scope ErrClusterUnavailable; a zero opts.Timeout
// with a ctx deadline leaves the wait to the ctx), with ErrTxnDone once the Txn ended, with
// ErrScopeConflict when asking for cluster scope (explicitly, or by default on a database with a
// coordinator) on a key this Txn holds node-scoped, and, if waiting for key would close a cycle
// of Txns waiting for each other, at once with an error matching ErrDeadlock. A Hold upgrade of a
// handle whose lock ended meanwhile fails with ErrLeaseExpired or ErrReleased. On failure nothing
// new is locked and the Txn keeps its other locks.
func (t *Txn) Lock(ctx context.Context, key []byte, opts Options) (*Handle, error) {
	return t.lock(ctx, 0, key, opts)
}

// LockCF is Lock of key in column family cf (nil: the default column family). A cf that cannot
// be a family of the Locker's database fails with an error matching ErrInvalidOptions.
func (t *Txn) LockCF(ctx context.Context, cf *grocksdb.ColumnFamilyHandle, key []byte, opts Options) (*Handle, error) {
	id, err := t.l.columnFamily(cf)
	if err != nil {
		return nil, err
	}
	return t.lock(ctx, id, key, opts)
}

func (t *Txn) lock(ctx context.Context, cf uint32, key []byte, opts Options) (*Handle, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	if ctx == nil {
		return nil, errNilContext
	}
	req := lockRequest{cf: cf, key: key, wait: true, owner: t}
	if cur, ok := t.locks.latest(cf, key); ok {
		if h, err := t.relock(ctx, cur.h, req, opts); h != nil || err != nil {
			return h, err
		}
	}
	if t.ranges() != nil {
		if h, err := t.lockInRange(ctx, req, opts); h != nil || err != nil {
			return h, err
		}
	}
	// Locker.Lock validates key, opts and ctx as relock does, in the same order.
	h, err := t.l.lock(ctx, req, &opts)
	if err != nil {
		return nil, err
	}
	t.locks.add(txnLock{h: h})
	return h, nil
}

// holdsAny reports whether t holds a lock now, of a key (looking from its latest) or a range. A
// wait of t for another key is then handed that key directly when it frees, never passed by a
// newcomer (docs/DESIGN.md §6): whoever waits for t's keys waits for that wait too.
func (t *Txn) holdsAny() bool {
	for i := len(t.locks.items) - 1; i >= 0; i-- {
		if !t.locks.items[i].h.dead() {
			return true
		}
	}
	if rs := t.ranges(); rs != nil {
		for _, l := range rs.items {
			if !l.h.dead() {
				return true
			}
		}
	}
	return false
}

// relock is Lock (or LockRange) of a record (or range) this Txn has locked with h: h itself while
// it authorizes writes (after the scope check and the upgrades opts ask for), else nil and nil so
// that Lock takes it anew.
func (t *Txn) relock(ctx context.Context, h *Handle, req lockRequest, opts Options) (*Handle, error) {
	h, err := t.reusable(ctx, h, req, opts)
	if h == nil || err != nil {
		return nil, err
	}
	if !opts.Shared && h.Shared() {
		if err := t.upgrade(ctx, h, opts); err != nil {
			return nil, err
		}
	}
	if opts.Hold {
		if err := h.UpgradeToHold(opts.Lease); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// reusable is relock without the upgrade: h if it may serve a re-entrant lock request req with
// opts, nil and nil if the key must be taken anew, or the error that forbids the lock.
func (t *Txn) reusable(ctx context.Context, h *Handle, req lockRequest, opts Options) (*Handle, error) {
	r, err := t.l.check(req, opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if h.IsExpired() {
		return nil, nil
	}
	if h.Scope() == ScopeNode && t.wantsCluster(r) {
		return nil, fmt.Errorf("%w: %q is held node-scoped by this transaction", ErrScopeConflict, req.key)
	}
	return h, nil
}

// upgrade makes h, a shared lock of this Txn, exclusive (docs/DESIGN.md §15.3), waiting for the
// other sharers to go within opts.Timeout, or with a zero Timeout and a ctx deadline, within the
// ctx alone (as Locker.Lock waits). An h under a round of the coordinator then asks it for an
// exclusive round within what is left of that wait (§8.5), and gives its shared round back once
// it has one. On failure h is unchanged.
func (t *Txn) upgrade(ctx context.Context, h *Handle, opts Options) error {
	r, err := t.l.opts.resolve(opts)
	if err != nil {
		return err
	}
	var coord Coordinator
	var waitEnd time.Duration // when the cluster half's wait runs out, on the Locker's clock
	if h.coordinated() {
		if coord, err = t.l.upgradeCoordinator(); err != nil {
			return err
		}
		if waitEnd, err = locktable.ClockDeadline(ctx, t.l.clock.Mono(), r.Timeout, opts.Timeout == 0); err != nil {
			return err
		}
	}
	u, err := h.claim.Upgrade(ctx, r.Timeout, opts.Timeout == 0)
	if err != nil || coord == nil {
		return t.l.fromTable(h, err)
	}
	sw, err := t.l.exclusiveRound(ctx, h, coord, waitEnd)
	if err != nil {
		u.Undo()
		return err
	}
	if release := sw.Replaced(); release != nil {
		t.l.ten.RunHook(release)
	}
	return nil
}

// wantsCluster reports whether a lock with options r would be cluster-scoped (or fail closed
// asking for it) on this database now.
func (t *Txn) wantsCluster(r Resolved) bool {
	coord, err := t.l.state.coord.choose(&r)
	return coord != nil || err != nil
}
