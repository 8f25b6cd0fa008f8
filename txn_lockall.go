package recordlock

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock/internal/locktable"
)

// LockAll locks every key of keys for this Txn, taking them in bytewise key order whatever order
// they are given in, so that Txns that lock their records with LockAll never wait for each other
// in a cycle, nor with Txns that each take one range lock: a request of a Txn never waits behind
// a queued request that waits for a lock this Txn holds. A key given twice is locked once. Keys
// this Txn already holds are re-entrant, as in Lock (with opts.Hold they are upgraded once every
// other key is locked), and so are keys inside a range the Txn holds in a mode at least as strong
// as asked: their place in the result is the range's handle, and they touch nothing and wait for
// nothing. With exclusive options
// (opts.Shared false), a key the Txn holds shared is upgraded, in its place in the key order, as
// Txn.Lock upgrades it (a cluster-scoped one with an exclusive round, within the call's Timeout;
// its shared round is given back once the call succeeds); with opts.Shared, a key it holds in
// either mode keeps its handle.
//
// opts.Timeout bounds the whole call, not each key: LockAll fails with ErrTimeout once it has
// waited that long in all; with a zero Timeout and a ctx with a deadline, the bound is the time
// left until that deadline when the call starts. It fails with an error matching ctx's error once
// ctx is done, and with an error matching ErrDeadlock if waiting for a key would close a cycle of
// Txns (possible only with Txns that lock in another order). Every handle it returns is live when
// it returns: if the lease of a key already locked, by this call or before it, ended while the
// call waited for a later key, LockAll fails with an error matching ErrLeaseExpired, or
// ErrReleased if another goroutine released that lock. With cluster scope it fails as Lock does
// when the scope cannot be granted (ErrClusterUnavailable), and ErrClosed when the Locker closes
// while it waits. Invalid options (an *OptionError matching ErrInvalidOptions), an empty key
// (ErrInvalidKey), a scope conflict (ErrScopeConflict), an ended Txn (ErrTxnDone), a closed
// Locker (ErrClosed) or, under WithMaxLocks, keys the Txn does not hold that do not all fit in
// the bound (ErrTooManyLocks) fail before anything is locked.
//
// It is all or nothing: on any failure it returns nil, the locks this call took are released,
// and the locks the Txn held before are unchanged (a Hold upgrade this call made to one of them
// is undone: lease, ExpiresAt, Hold and version counter; so is an upgrade to exclusive: the
// handle is shared again with its lease, and its shared round, as they were). On success the
// handles come back in the order of keys; a key given twice gets the same handle at both places.
func (t *Txn) LockAll(ctx context.Context, opts Options, keys ...[]byte) ([]*Handle, error) {
	return t.lockAll(ctx, 0, opts, keys)
}

// LockAllCF is LockAll of keys in column family cf (nil: the default column family). A cf that
// cannot be a family of the Locker's database fails, before anything is locked, with an error
// matching ErrInvalidOptions.
func (t *Txn) LockAllCF(ctx context.Context, cf *grocksdb.ColumnFamilyHandle, opts Options, keys ...[]byte) ([]*Handle, error) {
	id, err := t.l.columnFamily(cf)
	if err != nil {
		return nil, err
	}
	return t.lockAll(ctx, id, opts, keys)
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
			return nil, invalidKey(k)
		}
	}
	if ctx == nil {
		return nil, errNilContext
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The Timeout, or with none a ctx deadline, bounds the whole call, so it is kept on the clock.
	end, err := locktable.ClockDeadline(ctx, t.l.clock.Mono(), r.Timeout, opts.Timeout == 0)
	if err != nil {
		return nil, err
	}
	c := lockAllCall{t: t, cf: cf, ctx: ctx, opts: opts, end: end}

	// order lists the positions of keys sorted by key; equal keys are adjacent, the first of
	// each run stands for the run.
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return bytes.Compare(keys[i], keys[j]) })
	out := make([]*Handle, len(keys))
	first := func(n int) bool { return n == 0 || !bytes.Equal(keys[order[n-1]], keys[order[n]]) }

	// Keys this Txn holds first, by a lock of their own or inside one of its ranges: a scope
	// conflict must fail before anything is locked. A key inside a range of the Txn that serves
	// the mode asked is that range's handle, and waits for nothing: a request for it could only
	// queue behind requests that wait for the range (docs/DESIGN.md §17.3).
	var reentrant []*Handle
	for n, i := range order {
		if !first(n) {
			continue
		}
		held := t.heldFor(cf, keys[i], opts.Shared)
		if held == nil {
			continue
		}
		h, err := t.reusable(ctx, held, lockRequest{cf: cf, key: keys[i]}, opts)
		if err != nil {
			return nil, err
		}
		if h != nil {
			out[i] = h
			if !slices.Contains(reentrant, h) { // one range serves many keys; extend it once
				reentrant = append(reentrant, h)
			}
		}
	}
	// Under WithMaxLocks the keys to take must all fit before any is taken: their rooms are
	// reserved now, each take uses one, and a failure gives back those left.
	if err := c.reserve(order, out, first); err != nil {
		return nil, err
	}
	var taken []*Handle
	var madeExclusive []upgradeUndo // the upgrades made, to undo or, on success, to complete
	var extended []locktable.Undo   // the Hold extensions made, to undo
	fail := func(err error) ([]*Handle, error) {
		for _, u := range extended {
			u.Undo()
		}
		for _, u := range madeExclusive {
			u.undo(t.l)
		}
		for _, h := range taken {
			h.disown(true)
		}
		t.l.ten.Unreserve(c.room)
		return nil, err
	}
	for n, i := range order {
		if !first(n) {
			continue
		}
		if h := out[i]; h != nil {
			if !opts.Shared && h.Shared() {
				u, err := c.upgrade(h)
				if err != nil {
					return fail(err)
				}
				madeExclusive = append(madeExclusive, u)
			}
			continue
		}
		h, err := c.take(keys[i], len(taken) > 0)
		if err != nil {
			return fail(err)
		}
		out[i] = h
		taken = append(taken, h)
	}
	// A lease that lapsed, or a lock released by another goroutine, while the call waited for a
	// later key fails the call. Checked before the Hold extensions, so that this failure leaves
	// nothing to undo, and again after them, which take time.
	if err := allLive(reentrant, taken); err != nil {
		return fail(err)
	}
	if opts.Hold && len(reentrant) > 0 {
		if fp := t.l.failpoints.beforeHoldExtension; fp != nil {
			fp()
		}
		for _, h := range reentrant {
			u, err := h.extend(opts.Lease, true)
			if err != nil {
				return fail(cmp.Or(allLive([]*Handle{h}), err)) // it died since the check
			}
			extended = append(extended, u)
		}
		if err := allLive(reentrant, taken); err != nil {
			return fail(err)
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
	for _, u := range madeExclusive {
		u.keep(t.l)
	}
	return out, nil
}

// upgradeUndo is one upgrade a LockAll made: the table's, and for a handle under a round of the coordinator its
// switch to an exclusive round, whose shared round is kept until the call is over, so that
// undoing the upgrade can put it back (docs/DESIGN.md §8.5).
type upgradeUndo struct {
	local locktable.Undo
	round locktable.RoundSwitch
}

// undo makes the handle shared again: its shared round back (the exclusive one released), then
// its share in the table.
func (u upgradeUndo) undo(l *Locker) {
	if release := u.round.Revert(); release != nil {
		l.ten.RunHook(release)
	}
	u.local.Undo()
}

// keep completes the upgrade once the call succeeds: the shared round it replaced is given back.
func (u upgradeUndo) keep(l *Locker) {
	if release := u.round.Replaced(); release != nil {
		l.ten.RunHook(release)
	}
}

// heldFor returns the handle a LockAll of key in column family cf starts from: the Txn's
// latest lock of the key while it authorizes writes, or else the live handle of one of its ranges that covers the key in a
// mode at least as strong as asked (txnRanges.serving), or nil.
func (t *Txn) heldFor(cf uint32, key []byte, shared bool) *Handle {
	if cur, ok := t.locks.latest(cf, key); ok && !cur.h.IsExpired() {
		return cur.h
	}
	if rs := t.ranges(); rs != nil {
		return rs.serving(cf, key, shared)
	}
	return nil
}

// allLive is nil if every handle of both lists still authorizes writes, else ErrLeaseExpired for
// a lease that ended or ErrReleased for a lock given back, naming its key.
func allLive(lists ...[]*Handle) error {
	for _, hs := range lists {
		for _, h := range hs {
			if !h.IsExpired() {
				continue
			}
			if h.IsLeaseExpired() {
				return fmt.Errorf("%w: the lock of %q ended while LockAll ran", ErrLeaseExpired, h.key())
			}
			return fmt.Errorf("%w: the lock of %q was released while LockAll ran", ErrReleased, h.key())
		}
	}
	return nil
}

// lockAllCall is one LockAll's shared wait budget.
type lockAllCall struct {
	t    *Txn
	cf   uint32
	ctx  context.Context
	opts Options
	end  time.Duration // the Mono of the Locker's clock at which the call's Timeout runs out
	room int           // under WithMaxLocks, the rooms reserved for keys not taken yet
}

// reserve reserves, under WithMaxLocks, a room for each key of the call that the Txn does not
// hold (out[i] nil at the first of each run of equal keys in order) into c.room, which each take
// then lowers. It fails with an error matching ErrTooManyLocks, reserving nothing, when they do
// not all fit.
func (c *lockAllCall) reserve(order []int, out []*Handle, first func(int) bool) error {
	if !c.t.l.ten.Bounded() {
		return nil
	}
	n := 0
	for k, i := range order {
		if first(k) && out[i] == nil {
			n++
		}
	}
	if !c.t.l.ten.Reserve(n) {
		return c.t.l.tooManyLocks()
	}
	c.room = n
	return nil
}

// take locks key with what is left of the call's Timeout as the wait's own timeout, so keys
// freed one after another, each in time for a Lock of its own, still time out once in all.
// holding says that the call took keys before this one.
func (c *lockAllCall) take(key []byte, holding bool) (*Handle, error) {
	left, err := c.left()
	if err != nil {
		return nil, err
	}
	req := lockRequest{cf: c.cf, key: key, wait: true, owner: c.t, timeout: left, holding: holding}
	if c.t.l.ten.Bounded() {
		req.room = &c.room
	}
	return c.t.l.lock(c.ctx, req, &c.opts)
}

// upgrade makes h, a shared lock of the Txn, exclusive, with what is left of the call's Timeout:
// in the table, and for an h under a round of the coordinator in the cluster too, with an exclusive round it
// switches to (Txn.upgrade). It returns what makes h shared again; on failure h is unchanged.
func (c *lockAllCall) upgrade(h *Handle) (upgradeUndo, error) {
	l := c.t.l
	var coord Coordinator
	if h.coordinated() {
		var err error
		if coord, err = l.upgradeCoordinator(); err != nil {
			return upgradeUndo{}, err
		}
	}
	left, err := c.left()
	if err != nil {
		return upgradeUndo{}, err
	}
	u, err := h.claim.Upgrade(c.ctx, left, false)
	if err != nil || coord == nil {
		return upgradeUndo{local: u}, l.fromTable(h, err)
	}
	sw, err := l.exclusiveRound(c.ctx, h, coord, c.end)
	if err != nil {
		u.Undo()
		return upgradeUndo{}, err
	}
	return upgradeUndo{local: u, round: sw}, nil
}

// left is what is left of the call's Timeout, or ErrTimeout once it has run out.
func (c *lockAllCall) left() (time.Duration, error) {
	left := c.end - c.t.l.clock.Mono()
	if left <= 0 {
		return 0, fmt.Errorf("%w: LockAll's Timeout ran out", ErrTimeout)
	}
	return left, nil
}
