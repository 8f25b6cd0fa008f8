package recordlock_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock"
)

// The fence oracle: workers take key and range locks, shared and exclusive, in two column
// families, alone and in Txns of several steps (upgrades and Hold among them), on a ManualClock
// that a goroutine keeps moving so that leases lapse while grants race; another goroutine revokes
// and renews their handles. Every grant is checked inside its own Fence. The oracle keeps each
// running fence's lock (column family, key or span, mode, owner) from the moment its commit
// starts until it returns: a commit that starts while a fence of a conflicting lock of another
// owner runs breaks the rule together with §3, §13 and §15 (which locks
// exclude each other). It also keeps every lock granted until IsExpired reports it ended: inside a
// fence, whose lock cannot pass on, a conflicting lock of another owner that still authorizes
// writes was granted beside it. Each round runs on a fresh key-lock table (the table of a database
// is dropped with its last Locker), so that every round races its column families' first range
// requests with their first key requests, where the range space is made and the key shards noted.

// oracleSeed, oracleRounds and oracleOps fix a run of TestStressFenceOracle: the mutant catalogue
// runs a bounded one to show the oracle kills what it should. Short rounds race more first
// requests of a fresh table; long ones run more Txns through the locks' lapses and upgrades.
var (
	oracleSeed   = flag.Uint64("oracle.seed", 0, "seed of TestStressFenceOracle (0: a fresh one, logged)")
	oracleRounds = flag.Int("oracle.rounds", 0, "rounds of TestStressFenceOracle (0: its stressCount)")
	oracleOps    = flag.Int("oracle.ops", 0, "operations of each worker per round of TestStressFenceOracle (0: 4 in two rounds of three, 12 in the third)")
)

// fencedLock is a lock granted, as the oracle sees it.
type fencedLock struct {
	h        *recordlock.Handle
	cf       uint32
	start    []byte
	end      []byte // exclusive; nil: no upper bound
	isRange  bool
	shared   bool
	owner    string
	locker   int
	fenceSeq uint64
	grantSeq uint64        // its place among the round's grants, as the oracle was told of them
	grantAt  time.Duration // the clock's reading when it was told
}

func (x *fencedLock) String() string {
	mode := "exclusive"
	if x.shared {
		mode = "shared"
	}
	what := fmt.Sprintf("key %q", x.start)
	if x.isRange {
		what = fmt.Sprintf("range [%q, %q)", x.start, x.end)
		if x.end == nil {
			what = fmt.Sprintf("range [%q, no bound)", x.start)
		}
	}
	return fmt.Sprintf("%s %s of column family %d, owner %s (Locker %d, grant #%d at %v, fence #%d)",
		mode, what, x.cf, x.owner, x.locker, x.grantSeq, x.grantAt, x.fenceSeq)
}

// conflicts reports whether x and y exclude each other: one column family, key sets
// that meet, one of them exclusive, and different owners (a Txn's locks never conflict).
func (x *fencedLock) conflicts(y *fencedLock) bool {
	if x.owner == y.owner || x.cf != y.cf || x.shared && y.shared {
		return false
	}
	return (y.end == nil || bytes.Compare(x.start, y.end) < 0) && (x.end == nil || bytes.Compare(y.start, x.end) < 0)
}

// rule names what two conflicting locks whose fences ran at once broke.
func (x *fencedLock) rule(y *fencedLock) string {
	switch {
	case x.isRange || y.isRange:
		return "a fence keeps its lock from passing to another holder until its commit returns, and two locks of one column family conflict when their key sets meet and one is exclusive"
	case x.shared || y.shared:
		return "a fence keeps its lock from passing to another holder until its commit returns, and an exclusive lock excludes every other holder of the record"
	}
	return "a fence keeps its lock from passing to another holder until its commit returns, and a key has one exclusive holder"
}

// fenceOracle is the set of fences whose commit runs now, and the locks granted that may still
// be live.
type fenceOracle struct {
	t *testing.T
	// caught, when set, is told of each broken rule in place of t: for the test that shows the
	// oracle sees a conflict check turned off.
	caught func(msg string)

	// These are guarded by mu.
	mu      sync.Mutex
	running []*fencedLock
	granted map[*recordlock.Handle]*fencedLock // until IsExpired reports them ended, for good
	seq     uint64                             // fences begun
	grants  uint64                             // grants recorded
	// table lists what the round's key-lock table holds and queues, for a failure's message:
	// whether the table itself holds both locks. It is set before a round's workers start.
	table func() string

	checks   atomic.Int64 // fences checked
	failures atomic.Int64
}

// fail reports a broken rule; it keeps the log to the first few of a run.
func (o *fenceOracle) fail(format string, args ...any) {
	switch {
	case o.caught != nil:
		o.failures.Add(1)
		o.caught(fmt.Sprintf(format, args...))
	case o.failures.Add(1) <= 5:
		o.t.Errorf(format, args...)
	}
}

// enter is the start of x's commit: no conflicting lock of another owner may be inside a fence.
func (o *fenceOracle) enter(x *fencedLock) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seq++
	x.fenceSeq = o.seq
	for _, y := range o.running {
		if x.conflicts(y) {
			o.fail("%s\n\tthe commit of the fence of %s\n\tstarted while the fence of %s ran\n\tLocks() lists:%s",
				x.rule(y), x, y, o.table())
		}
	}
	o.running = append(o.running, x)
	o.checks.Add(1)
	// x's lock cannot pass to another holder until this commit returns, so no conflicting lock
	// of another owner may authorize writes now either: one that does was granted while x's was
	// held, or x's while it was.
	for h, y := range o.granted {
		if h == x.h {
			continue
		}
		if h.IsExpired() {
			delete(o.granted, h) // for good: released, revoked or lapsed
			continue
		}
		y.shared = h.Shared() // a Txn may have upgraded it since
		if x.conflicts(y) {
			rule := x.rule(y)
			if testutil.Closed(h.Done()) && !h.IsExpired() {
				rule = "Done closes as soon as a handle stops authorizing writes, and IsExpired is then true for good; of two conflicting locks"
			}
			o.fail("%s\n\tinside the fence of %s\n\t%s authorizes writes (IsExpired is false; Done closed: %v)\n\tLocks() lists:%s",
				rule, x, y, testutil.Closed(h.Done()), o.table())
		}
	}
}

// grant records x, just granted, among the locks that may be live.
func (o *fenceOracle) grant(x *fencedLock) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.granted == nil {
		o.granted = map[*recordlock.Handle]*fencedLock{}
	}
	if _, ok := o.granted[x.h]; !ok { // a Txn's lock it asked for again is the one it had
		o.grants++
		x.grantSeq = o.grants
		o.granted[x.h] = x
	}
}

// exit is the return of x's commit.
func (o *fenceOracle) exit(x *fencedLock) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, y := range o.running {
		if y == x {
			o.running = append(o.running[:i], o.running[i+1:]...)
			return
		}
	}
}

// grantOf is h's grant as the oracle was told of it, or nil.
func (o *fenceOracle) grantOf(h *recordlock.Handle) *fencedLock {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.granted[h]
}

// fencing returns a fence of h that runs now, or nil.
func (o *fenceOracle) fencing(h *recordlock.Handle) *fencedLock {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, y := range o.running {
		if y.h == h {
			return y
		}
	}
	return nil
}

// handlePool is the handles other goroutines may revoke or renew while their owners use them.
type handlePool struct {
	mu sync.Mutex
	hs []*recordlock.Handle
	at int
}

func (p *handlePool) add(h *recordlock.Handle) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.hs) < 32 {
		p.hs = append(p.hs, h)
		return
	}
	p.hs[p.at] = h
	p.at = (p.at + 1) % len(p.hs)
}

func (p *handlePool) pick(r *rand.Rand) *recordlock.Handle {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.hs) == 0 {
		return nil
	}
	return p.hs[r.IntN(len(p.hs))]
}

// oracleRound is one round's database as its workers see it: two Lockers of one fresh table on
// one ManualClock, and two column families (nil is the default one).
type oracleRound struct {
	t       *testing.T
	o       *fenceOracle
	clk     *recordlock.ManualClock
	lockers [2]*recordlock.Locker
	cfs     [2]*grocksdb.ColumnFamilyHandle
	pool    handlePool
	stop    atomic.Bool
	counts  oracleCounts
}

// oracleCounts is what a run did, for its log line and for its checks that it did it.
type oracleCounts struct {
	grants, fences, refused, txns, commits, upgrades, deadlocks, timeouts, revokes, renews, lapsedAtFence atomic.Int64
}

// oracleKeys are each column family's keys: enough to spread over many shards, few enough that
// the locks meet.
var oracleKeys = func() [][]byte {
	keys := make([][]byte, 24)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "k%02d", i)
	}
	return keys
}()

// oracleWorker is one goroutine of a round, with its own random source.
type oracleWorker struct {
	rd     *oracleRound
	r      *rand.Rand
	id     int
	n      int // locks and Txns begun, for owner names
	ctx    context.Context
	locker int
	// unreleased are the locks it left to lapse, released (which settles a lapse) as it ends.
	unreleased []*recordlock.Handle
}

func (w *oracleWorker) l() *recordlock.Locker { return w.rd.lockers[w.locker] }

func (w *oracleWorker) opts(shared bool) recordlock.Options {
	return recordlock.Options{
		Scope:   recordlock.ScopeNode,
		Lease:   recordlock.MinLease + time.Duration(w.r.IntN(200))*time.Millisecond,
		Timeout: time.Duration(1+w.r.IntN(150)) * time.Millisecond,
		Shared:  shared,
	}
}

func (w *oracleWorker) key() []byte { return oracleKeys[w.r.IntN(len(oracleKeys))] }

// span draws a range: two keys' span, a prefix, a span with no upper bound, or rarely the whole
// column family.
func (w *oracleWorker) span() recordlock.Range {
	switch p := w.r.IntN(20); {
	case p < 12:
		a, b := w.r.IntN(len(oracleKeys)), w.r.IntN(len(oracleKeys))
		if a > b {
			a, b = b, a
		}
		return recordlock.Range{Start: oracleKeys[a], End: append(bytes.Clone(oracleKeys[b]), 0)}
	case p < 17:
		return recordlock.Prefix(fmt.Appendf(nil, "k%d", w.r.IntN(3)))
	case p < 19:
		return recordlock.Range{Start: oracleKeys[w.r.IntN(len(oracleKeys))]}
	}
	return recordlock.Prefix(nil)
}

// expected reports whether err is an outcome a lock of the round may have; anything else fails.
func (w *oracleWorker) expected(what string, err error) bool {
	c := &w.rd.counts
	switch {
	case errors.Is(err, recordlock.ErrTimeout), errors.Is(err, recordlock.ErrLocked):
		c.timeouts.Add(1)
	case errors.Is(err, recordlock.ErrDeadlock):
		c.deadlocks.Add(1)
	case errors.Is(err, recordlock.ErrLeaseExpired), errors.Is(err, recordlock.ErrReleased):
	case w.ctx.Err() != nil:
		w.rd.t.Errorf("%s: a wait ran past its Timeout on the ManualClock, which kept moving, for %v of real time (Lock waits until opts.Timeout has passed): %v", what, oracleGuard, err)
	default:
		w.rd.t.Errorf("%s: %v", what, err)
	}
	return false
}

// oracleGuard bounds a round in real time: a wait that outlives it is a failure, not a hang.
const oracleGuard = 30 * time.Second

// fence checks h's grant inside its own Fence, as owner, and checks what Fence promises of a
// lease that ended: a handle past its deadline reports it (the rule, on the monotonic
// deadline, which this clock keeps in step with the wall one), and Fence then refuses to run
// commit (§5.7).
func (w *oracleWorker) fence(h *recordlock.Handle, owner string) {
	x := w.lockOf(h, owner)
	if g := w.rd.o.grantOf(h); g != nil {
		x.grantSeq, x.grantAt = g.grantSeq, g.grantAt
	}
	now := w.rd.clk.Now()
	ended := h.IsLeaseExpired()
	if !ended && !now.Before(h.ExpiresAt()) {
		w.rd.o.fail("%s is past its deadline (now %v, ExpiresAt %v on a clock whose wall and monotonic readings move together) but IsLeaseExpired is false", x, now, h.ExpiresAt())
	}
	ran := false
	err := h.Fence(func() error {
		ran = true
		w.rd.o.enter(x)
		for range w.r.IntN(4) {
			runtime.Gosched() // let the clock, the revoker and the other workers run inside the fence
		}
		_ = h.IsExpired() // commit may call the handle's predicates (§5.7)
		w.rd.o.exit(x)
		return nil
	})
	w.rd.counts.fences.Add(1)
	switch {
	case ended && ran:
		w.rd.o.fail("Fence ran the commit of %s after IsLeaseExpired had returned true", x)
	case err == nil && !ran:
		w.rd.o.fail("Fence of %s returned nil without running its commit", x)
	case err != nil && ran:
		w.rd.o.fail("Fence of %s ran its commit and returned %v, not the commit's nil", x, err)
	case err != nil && !errors.Is(err, recordlock.ErrLeaseExpired):
		w.rd.t.Errorf("Fence of %s: %v", x, err)
	case err != nil:
		w.rd.counts.refused.Add(1)
		if ended {
			w.rd.counts.lapsedAtFence.Add(1)
		}
	}
}

// lockOf is h as the oracle sees it, held by owner.
func (w *oracleWorker) lockOf(h *recordlock.Handle, owner string) *fencedLock {
	x := &fencedLock{h: h, cf: h.ColumnFamilyID(), shared: h.Shared(), owner: owner, locker: w.locker}
	if r, ok := h.Range(); ok {
		x.start, x.end, x.isRange = r.Start, r.End, true
	} else {
		x.start = h.Key()
		x.end = append(bytes.Clone(x.start), 0)
	}
	return x
}

// granted records a grant to owner with the oracle and offers its handle to the revoker.
func (w *oracleWorker) granted(h *recordlock.Handle, owner string) {
	x := w.lockOf(h, owner)
	x.grantAt = w.rd.clk.Mono()
	w.rd.o.grant(x)
	w.rd.counts.grants.Add(1)
	if w.r.IntN(4) == 0 {
		w.rd.pool.add(h)
	}
}

// run does ops operations: a lock of a key or a range, or a Txn of several steps.
func (w *oracleWorker) run(ops int) {
	defer func() {
		for _, h := range w.unreleased {
			h.Release()
		}
	}()
	for range ops {
		if w.rd.stop.Load() {
			return
		}
		w.locker = w.r.IntN(2)
		switch p := w.r.IntN(10); {
		case p < 3:
			w.plainKey()
		case p < 5:
			w.plainRange()
		default:
			w.txn()
		}
	}
}

// cf draws a column family: its index among the round's, and the handle the calls take.
func (w *oracleWorker) cf() (int, *grocksdb.ColumnFamilyHandle) {
	i := w.r.IntN(2)
	return i, w.rd.cfs[i]
}

// plainKey locks a key outside any Txn, fences it, maybe renews it and fences again, and
// releases it, or leaves it to lapse.
func (w *oracleWorker) plainKey() {
	w.n++
	owner := fmt.Sprintf("lock w%d.%d", w.id, w.n)
	ci, cf := w.cf()
	key, opts := w.key(), w.opts(w.r.IntN(3) == 0)
	var h *recordlock.Handle
	var err error
	switch {
	case w.r.IntN(4) == 0 && ci == 0:
		h, err = w.l().TryLock(key, opts)
	case w.r.IntN(4) == 0:
		h, err = w.l().TryLockCF(cf, key, opts)
	case ci == 0:
		h, err = w.l().Lock(w.ctx, key, opts)
	default:
		h, err = w.l().LockCF(w.ctx, cf, key, opts)
	}
	if err != nil {
		w.expected(owner, err)
		return
	}
	w.granted(h, owner)
	w.fence(h, owner)
	if w.r.IntN(3) == 0 {
		if err := h.Renew(opts.Lease); err == nil {
			w.rd.counts.renews.Add(1)
		} else if !errors.Is(err, recordlock.ErrLeaseExpired) {
			w.rd.t.Errorf("%s: Renew: %v", owner, err)
		}
		w.fence(h, owner)
	}
	w.releaseOrLeave(h)
}

// releaseOrLeave releases h, or now and then leaves it to lapse while the round goes on.
func (w *oracleWorker) releaseOrLeave(h *recordlock.Handle) {
	if w.r.IntN(8) == 0 {
		w.unreleased = append(w.unreleased, h)
		return
	}
	h.Release()
}

// plainRange is plainKey for a range.
func (w *oracleWorker) plainRange() {
	w.n++
	owner := fmt.Sprintf("range lock w%d.%d", w.id, w.n)
	ci, cf := w.cf()
	r, opts := w.span(), w.opts(w.r.IntN(3) == 0)
	var h *recordlock.Handle
	var err error
	switch {
	case w.r.IntN(4) == 0 && ci == 0:
		h, err = w.l().TryLockRange(r, opts)
	case w.r.IntN(4) == 0:
		h, err = w.l().TryLockRangeCF(cf, r, opts)
	case ci == 0:
		h, err = w.l().LockRange(w.ctx, r, opts)
	default:
		h, err = w.l().LockRangeCF(w.ctx, cf, r, opts)
	}
	if err != nil {
		w.expected(owner, err)
		return
	}
	w.granted(h, owner)
	w.fence(h, owner)
	w.releaseOrLeave(h)
}

// txnShared is a lock a Txn holds shared, which a later step may upgrade.
type txnShared struct {
	ci    int
	key   []byte
	r     recordlock.Range
	isRng bool
}

// txn runs a Txn of two to five steps (key locks, ranges, prefixes, LockAll, shared locks and
// upgrades of them, some with Hold), fencing each step's handles as the Txn's, and commits it,
// with a write under an exclusive key lock now and then, or rolls it back. It then fences the
// locks it held with Hold, which outlive it with no owner, and releases them.
func (w *oracleWorker) txn() {
	w.n++
	name := fmt.Sprintf("txn w%d.%d", w.id, w.n)
	txn, err := w.l().BeginTx(recordlock.TxnOptions{Name: name})
	if err != nil {
		w.rd.t.Errorf("%s: BeginTx: %v", name, err)
		return
	}
	w.rd.counts.txns.Add(1)
	var held []*recordlock.Handle
	var sharedOnes []txnShared
	ok, wrote := true, false
	for range 2 + w.r.IntN(4) {
		ci, cf := w.cf()
		opts := w.opts(w.r.IntN(2) == 0)
		opts.Hold = w.r.IntN(6) == 0
		var hs []*recordlock.Handle
		var what string
		switch p := w.r.IntN(10); {
		case p < 3:
			key := w.key()
			what = fmt.Sprintf("Lock of %q", key)
			var h *recordlock.Handle
			h, err = txn.LockCF(w.ctx, cf, key, opts)
			hs = append(hs, h)
			if err == nil && opts.Shared {
				sharedOnes = append(sharedOnes, txnShared{ci: ci, key: key})
			}
		case p < 6:
			r := w.span()
			what = fmt.Sprintf("LockRange of [%q, %q)", r.Start, r.End)
			var h *recordlock.Handle
			h, err = txn.LockRangeCF(w.ctx, cf, r, opts)
			hs = append(hs, h)
			if err == nil && opts.Shared {
				sharedOnes = append(sharedOnes, txnShared{ci: ci, r: r, isRng: true})
			}
		case p < 8:
			keys := [][]byte{w.key(), w.key(), w.key()}
			what = fmt.Sprintf("LockAll of %q", keys)
			hs, err = txn.LockAllCF(w.ctx, cf, opts, keys...)
		default:
			if len(sharedOnes) == 0 {
				continue
			}
			s := sharedOnes[w.r.IntN(len(sharedOnes))]
			opts.Shared, opts.Hold = false, false
			var h *recordlock.Handle
			if s.isRng {
				what = fmt.Sprintf("upgrade of the range [%q, %q)", s.r.Start, s.r.End)
				h, err = txn.LockRangeCF(w.ctx, w.rd.cfs[s.ci], s.r, opts)
			} else {
				what = fmt.Sprintf("upgrade of %q", s.key)
				h, err = txn.LockCF(w.ctx, w.rd.cfs[s.ci], s.key, opts)
			}
			hs = append(hs, h)
			if err == nil {
				w.rd.counts.upgrades.Add(1)
			}
		}
		if err != nil {
			w.expected(name+": "+what, err)
			ok = false
			break
		}
		for _, h := range hs {
			w.granted(h, name)
			w.fence(h, name)
			if opts.Hold && !slices.Contains(held, h) { // a Fence after its Release would not be protected
				held = append(held, h)
			}
			if _, isRange := h.Range(); !isRange && !h.Shared() && w.r.IntN(3) == 0 {
				if err := txn.PutCF(w.rd.cfs[min(h.ColumnFamilyID(), 1)], h.Key(), []byte(name)); err == nil {
					wrote = true
				} else if !errors.Is(err, recordlock.ErrLeaseExpired) && !errors.Is(err, recordlock.ErrReleased) {
					w.rd.t.Errorf("%s: Put of %q: %v", name, h.Key(), err)
				}
			}
		}
	}
	if ok && (wrote || w.r.IntN(2) == 0) {
		if err := txn.Commit(); err == nil {
			w.rd.counts.commits.Add(1)
		} else if !errors.Is(err, recordlock.ErrLeaseExpired) {
			w.rd.t.Errorf("%s: Commit: %v (nil, or ErrLeaseExpired when a lease it relies on ended)", name, err)
		}
	} else {
		txn.Rollback()
	}
	for _, h := range held {
		if !h.Hold() {
			continue // a step with Hold that returned a lock the Txn had without it: released with the Txn
		}
		w.fence(h, name) // its owner still: the Txn's locks were granted together
		h.Release()
	}
}

// revoker revokes and renews handles of the pool while their owners use them: once RevokeLease
// returns, no fence of the handle runs.
func (rd *oracleRound) revoker(r *rand.Rand) {
	for !rd.stop.Load() {
		h := rd.pool.pick(r)
		if h == nil {
			runtime.Gosched()
			continue
		}
		if r.IntN(3) == 0 {
			if err := h.Renew(recordlock.MinLease + time.Duration(r.IntN(100))*time.Millisecond); err == nil {
				rd.counts.renews.Add(1)
			}
		} else {
			h.RevokeLease()
			rd.counts.revokes.Add(1)
			if x := rd.o.fencing(h); x != nil {
				rd.o.fail("RevokeLease returned while the fence of %s still ran its commit", x)
			}
		}
		for range 1 + r.IntN(8) {
			runtime.Gosched()
		}
	}
}

// advance keeps the round's clock moving until stop: leases lapse and waits time out while the
// workers' grants race.
func (rd *oracleRound) advance(r *rand.Rand, stop *atomic.Bool) {
	for !stop.Load() {
		rd.clk.Advance(time.Duration(r.IntN(25_000)) * time.Microsecond)
		for range 1 + r.IntN(16) {
			runtime.Gosched()
		}
	}
}

// leftovers lists what Locks and Waits still show once every worker has let go of everything.
func (rd *oracleRound) leftovers() []string {
	var left []string
	for li := range rd.lockers[0].Locks() {
		left = append(left, fmt.Sprintf("Locks() lists %s %q of column family %d (owner %q, shared %v, range end %q, %v of lease left)",
			keyOrStart(li.IsRange), li.Key, li.ColumnFamilyID, li.Owner, li.Shared, li.RangeEnd, li.Remaining))
	}
	for wi := range rd.lockers[0].Waits() {
		left = append(left, fmt.Sprintf("Waits() lists %s %q of column family %d (owner %q, shared %v, upgrade %v, range end %q)",
			keyOrStart(wi.IsRange), wi.Key, wi.ColumnFamilyID, wi.Owner, wi.Shared, wi.Upgrade, wi.RangeEnd))
	}
	return left
}

func keyOrStart(isRange bool) string {
	if isRange {
		return "a range starting at"
	}
	return "the key"
}

// TestStressFenceOracle is the fence oracle's run: rounds of workers, each round on a fresh
// key-lock table. Invariants: no two conflicting locks of different owners are ever inside a
// fence at once (the rule with §3, §13 and §15); a handle past its deadline reports its lease
// ended and Fence refuses it (§5.1, §5.7); once RevokeLease returns no fence of its handle runs
// (§5.7); and once every worker let go, Locks and Waits are empty (§11, §14). A failure names the
// two locks and the rule, and the seed to run again with -oracle.seed.
func TestStressFenceOracle(t *testing.T) {
	const workers = 6
	rounds := stressCount(120, 12000)
	if *oracleRounds > 0 {
		rounds = *oracleRounds
	}
	seed := *oracleSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d, %d rounds (-oracle.seed, -oracle.rounds run it again)", seed, rounds)
	db, cfs := openCFDB(t, "second")
	o := &fenceOracle{t: t}
	var total oracleCounts
	for round := range rounds {
		ops := *oracleOps
		if ops == 0 {
			ops = []int{4, 4, 12}[round%3]
		}
		if !runOracleRound(t, db, cfs[0], o, seed, round, workers, ops, &total, nil) || t.Failed() {
			t.Logf("failed in round %d of seed %d", round, seed)
			break
		}
	}
	c := &total
	t.Logf("%d grants, %d fences checked against every running one (%d refused: %d of a lease already ended); %d Txns, %d committed, %d upgrades; %d deadlocks, %d timeouts; %d revocations, %d renewals",
		c.grants.Load(), o.checks.Load(), c.refused.Load(), c.lapsedAtFence.Load(), c.txns.Load(), c.commits.Load(), c.upgrades.Load(),
		c.deadlocks.Load(), c.timeouts.Load(), c.revokes.Load(), c.renews.Load())
	if !t.Failed() {
		// The run did what it is for: fences ran, some were refused as leases ended under them,
		// and Txns upgraded and committed.
		for what, n := range map[string]int64{"fence checked": o.checks.Load(), "fence refused": c.refused.Load(),
			"upgrade": c.upgrades.Load(), "commit": c.commits.Load(), "revocation": c.revokes.Load()} {
			if n == 0 {
				t.Errorf("no %s in %d rounds: the run proves less than it claims", what, rounds)
			}
		}
	}
}

// runOracleRound runs one round on a fresh table of db and reports whether it ended clean.
// opts are more options of the round's Lockers.
func runOracleRound(t *testing.T, db *grocksdb.DB, second *grocksdb.ColumnFamilyHandle, o *fenceOracle, seed uint64, round, workers, ops int,
	total *oracleCounts, opts []recordlock.Option) bool {
	rd := &oracleRound{t: t, o: o, clk: recordlock.NewManualClock(epoch), cfs: [2]*grocksdb.ColumnFamilyHandle{nil, second}}
	for i := range rd.lockers {
		l, err := recordlock.New(db, append([]recordlock.Option{recordlock.WithClock(rd.clk), recordlock.WithLogger(quiet)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		rd.lockers[i] = l
	}
	defer func() {
		for _, l := range rd.lockers {
			_ = l.Close()
		}
	}()
	o.table = func() string {
		var b strings.Builder
		n := 0
		for li := range rd.lockers[0].Locks() {
			if n++; n <= 40 {
				fmt.Fprintf(&b, "\n\t\t%s %q of column family %d (range end %q), shared %v, owner %q, %v of lease left",
					keyOrStart(li.IsRange), li.Key, li.ColumnFamilyID, li.RangeEnd, li.Shared, li.Owner, li.Remaining)
			}
		}
		fmt.Fprintf(&b, "\n\t\t(%d in all)\n\tWaits() lists:", n)
		n = 0
		for wi := range rd.lockers[0].Waits() {
			if n++; n <= 40 {
				fmt.Fprintf(&b, "\n\t\t%s %q of column family %d (range end %q), shared %v, upgrade %v, owner %q",
					keyOrStart(wi.IsRange), wi.Key, wi.ColumnFamilyID, wi.RangeEnd, wi.Shared, wi.Upgrade, wi.Owner)
			}
		}
		fmt.Fprintf(&b, "\n\t\t(%d in all)", n)
		return b.String()
	}
	if n := rd.lockers[0].Stats().Acquired; n != 0 {
		t.Fatalf("round %d: the table is not fresh: %d acquisitions already (the table of a database is dropped when its last Locker closes)", round, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), oracleGuard) // turns a hang into a failure
	defer cancel()
	var clockStop atomic.Bool
	var bg, wg sync.WaitGroup
	bg.Go(func() { rd.advance(rand.New(rand.NewPCG(seed, uint64(round)<<8|0xff)), &clockStop) })
	bg.Go(func() { rd.revoker(rand.New(rand.NewPCG(seed, uint64(round)<<8|0xfe))) })
	start := make(chan struct{})
	for i := range workers {
		w := &oracleWorker{rd: rd, r: rand.New(rand.NewPCG(seed, uint64(round)<<8|uint64(i))), id: i, ctx: ctx}
		wg.Go(func() {
			<-start // together, so that the first range requests race the first key requests
			w.run(ops)
		})
	}
	close(start)
	wg.Wait()
	rd.stop.Store(true)
	clockStop.Store(true)
	bg.Wait()

	clean := true
	if left := rd.leftovers(); len(left) > 0 {
		t.Errorf("round %d: every worker let go of its locks, but (Locks and Waits show what is held and queued now):\n\t%s",
			round, strings.Join(left, "\n\t"))
		clean = false
	}
	for _, c := range []struct{ to, from *atomic.Int64 }{
		{&total.grants, &rd.counts.grants}, {&total.fences, &rd.counts.fences}, {&total.refused, &rd.counts.refused},
		{&total.txns, &rd.counts.txns}, {&total.commits, &rd.counts.commits}, {&total.upgrades, &rd.counts.upgrades},
		{&total.deadlocks, &rd.counts.deadlocks}, {&total.timeouts, &rd.counts.timeouts}, {&total.revokes, &rd.counts.revokes},
		{&total.renews, &rd.counts.renews}, {&total.lapsedAtFence, &rd.counts.lapsedAtFence},
	} {
		c.to.Add(c.from.Load())
	}
	return clean
}

// TestStressFenceOracleSeesRangesWithoutConflicts shows that the oracle is not blind: with the
// table's range conflict check off (WithoutRangeConflicts, a test-only option), it names a range
// lock granted beside a conflicting lock within a few rounds, as the rule's rule.
func TestStressFenceOracleSeesRangesWithoutConflicts(t *testing.T) {
	const workers, ops, attempts = 6, 4, 50
	db, cfs := openCFDB(t, "second")
	var msgs []string
	var mu sync.Mutex
	o := &fenceOracle{t: t, caught: func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		msgs = append(msgs, msg)
	}}
	seed := uint64(time.Now().UnixNano())
	var total oracleCounts
	for round := range attempts {
		runOracleRound(t, db, cfs[0], o, seed, round, workers, ops, &total, []recordlock.Option{recordlock.WithoutRangeConflicts()})
		if o.failures.Load() > 0 {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(msgs) == 0 {
		t.Fatalf("%d rounds of seed %d with the range conflict check off and no conflict seen: the oracle is blind", attempts, seed)
	}
	if !strings.Contains(msgs[0], "key sets meet") || !strings.Contains(msgs[0], "range") {
		t.Errorf("the oracle's report does not name the range rule and a range lock:\n%s", msgs[0])
	}
	t.Logf("caught in %d grants: %s", total.grants.Load(), msgs[0])
}
