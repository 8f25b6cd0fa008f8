package recordlock_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// The register model: one RocksDB value guarded by one record lock. Every lock grant gets a fresh
// holder id g and moves write authority to g; a write stores (g, seq) and may succeed only while
// g is the authorized holder. A lease lapse is not an operation anyone observes, so the model
// never needs it: the next grant, a failed fenced write, a failed Release or a revocation is what
// ends g's authority. A write that lands after a successor's Lock returned therefore has no
// linearization, which is exactly what fencing must prevent. A shared lock's grant ends every
// writer's authority too; a read fenced by it must see the register's value, and the reader's
// Commit may succeed only while the register still holds that value: no write lands between a
// fenced read under a shared lock and the Commit of its Txn.

type regOp uint8

const (
	regLock regOp = iota
	regWrite
	regRead
	regRelease
	regRevoke
	regEnd // a Txn's Commit or Rollback ended its lock; whether it was still held is not observed
	// A shared lock's grant, which ends every writer's authority; a read fenced by it; and the
	// Commit of the reader's Txn, which succeeds only if the register still holds what it read.
	regLockShared
	regFencedRead
	regReadCommit
)

// regVal is what the register holds: the id of the holder that wrote it and that holder's
// sequence number. The zero value is the empty register.
type regVal struct{ G, Seq int64 }

type regInput struct {
	Op  regOp
	G   int64  // the holder id of a write, release or revoke
	Seq int64  // the sequence number a write stores
	Val regVal // what a reader's Txn read, for its Commit
}

type regOutput struct {
	OK  bool   // lock granted, write landed, Release returned true
	G   int64  // the id of a granted lock
	Val regVal // what a read saw
}

type regState struct {
	Auth int64 // the holder whose writes may land; 0 for none
	Val  regVal
}

var registerModel = porcupine.Model{
	Init: func() any { return regState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(regState), input.(regInput), output.(regOutput)
		switch in.Op {
		case regLock:
			if out.OK {
				s.Auth = out.G
			}
		case regWrite:
			if out.OK {
				if s.Auth != in.G {
					return false, s
				}
				s.Val = regVal{G: in.G, Seq: in.Seq}
			} else if s.Auth == in.G {
				s.Auth = 0 // ErrLeaseExpired: the lease is over for good
			}
		case regRead, regFencedRead:
			return out.Val == s.Val, s
		case regLockShared:
			if out.OK {
				s.Auth = 0
			}
		case regReadCommit:
			if out.OK && in.Val != s.Val {
				return false, s
			}
		case regRelease:
			if out.OK && s.Auth != in.G {
				return false, s
			}
			if s.Auth == in.G {
				s.Auth = 0
			}
		case regRevoke, regEnd:
			if s.Auth == in.G {
				s.Auth = 0
			}
		}
		return true, s
	},
	Hash: func(state any) uint64 {
		s := state.(regState)
		return uint64(s.Auth)*0x9e3779b97f4a7c15 ^ uint64(s.Val.G)<<32 ^ uint64(s.Val.Seq)
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		switch in.Op {
		case regLock:
			return fmt.Sprintf("lock -> %v g%d", out.OK, out.G)
		case regWrite:
			return fmt.Sprintf("write(g%d,%d) -> %v", in.G, in.Seq, out.OK)
		case regRead:
			return fmt.Sprintf("read -> (g%d,%d)", out.Val.G, out.Val.Seq)
		case regRelease:
			return fmt.Sprintf("release(g%d) -> %v", in.G, out.OK)
		case regEnd:
			return fmt.Sprintf("end(g%d)", in.G)
		case regLockShared:
			return fmt.Sprintf("lock shared -> %v g%d", out.OK, out.G)
		case regFencedRead:
			return fmt.Sprintf("fenced read(g%d) -> (g%d,%d)", in.G, out.Val.G, out.Val.Seq)
		case regReadCommit:
			return fmt.Sprintf("commit(g%d) of read (g%d,%d) -> %v", in.G, in.Val.G, in.Val.Seq, out.OK)
		}
		return fmt.Sprintf("revoke(g%d)", in.G)
	},
}

// TestRegisterModelHasTeeth checks the model itself on hand-written histories: the stale write
// the real runs must never produce is rejected, and its legal neighbours are accepted.
func TestRegisterModelHasTeeth(t *testing.T) {
	op := func(call, ret int64, in regInput, out regOutput) porcupine.Operation {
		return porcupine.Operation{Call: call, Return: ret, Input: in, Output: out}
	}
	lock := func(call, ret, g int64) porcupine.Operation {
		return op(call, ret, regInput{Op: regLock}, regOutput{OK: true, G: g})
	}
	write := func(call, ret, g, seq int64, ok bool) porcupine.Operation {
		return op(call, ret, regInput{Op: regWrite, G: g, Seq: seq}, regOutput{OK: ok})
	}
	read := func(call, ret, g, seq int64) porcupine.Operation {
		return op(call, ret, regInput{Op: regRead}, regOutput{Val: regVal{g, seq}})
	}
	lockShared := func(call, ret, g int64) porcupine.Operation {
		return op(call, ret, regInput{Op: regLockShared}, regOutput{OK: true, G: g})
	}
	fencedRead := func(call, ret, g, vg, seq int64) porcupine.Operation {
		return op(call, ret, regInput{Op: regFencedRead, G: g}, regOutput{Val: regVal{vg, seq}})
	}
	readCommit := func(call, ret, g, vg, seq int64, ok bool) porcupine.Operation {
		return op(call, ret, regInput{Op: regReadCommit, G: g, Val: regVal{vg, seq}}, regOutput{OK: ok})
	}
	cases := []struct {
		name string
		ops  []porcupine.Operation
		want bool
	}{
		{"fenced stale write fails", []porcupine.Operation{lock(0, 1, 1), write(2, 3, 1, 1, true), lock(4, 5, 2), write(6, 7, 1, 2, false), read(8, 9, 1, 1)}, true},
		{"stale write lands after successor", []porcupine.Operation{lock(0, 1, 1), lock(2, 3, 2), write(4, 5, 1, 1, true)}, false},
		{"stale write concurrent with grant", []porcupine.Operation{lock(0, 1, 1), lock(2, 5, 2), write(3, 4, 1, 1, true)}, true},
		{"write after own failed write", []porcupine.Operation{lock(0, 1, 1), write(2, 3, 1, 1, false), write(4, 5, 1, 2, true)}, false},
		{"write after revoke returned", []porcupine.Operation{lock(0, 1, 1), op(2, 3, regInput{Op: regRevoke, G: 1}, regOutput{}), write(4, 5, 1, 1, true)}, false},
		{"release true after successor", []porcupine.Operation{lock(0, 1, 1), lock(2, 3, 2), op(4, 5, regInput{Op: regRelease, G: 1}, regOutput{OK: true})}, false},
		{"lost write", []porcupine.Operation{lock(0, 1, 1), write(2, 3, 1, 1, true), read(4, 5, 0, 0)}, false},
		{"reader commits what it read", []porcupine.Operation{lock(0, 1, 1), write(2, 3, 1, 1, true), op(4, 5, regInput{Op: regRelease, G: 1}, regOutput{OK: true}),
			lockShared(6, 7, 2), fencedRead(8, 9, 2, 1, 1), readCommit(10, 11, 2, 1, 1, true)}, true},
		{"write between fenced read and reader's commit", []porcupine.Operation{lock(0, 1, 1), lockShared(2, 3, 2), fencedRead(4, 5, 2, 0, 0),
			lock(6, 7, 3), write(8, 9, 3, 1, true), readCommit(10, 11, 2, 0, 0, true)}, false},
		{"refused reader commit after a write", []porcupine.Operation{lockShared(0, 1, 2), fencedRead(2, 3, 2, 0, 0),
			lock(4, 5, 3), write(6, 7, 3, 1, true), readCommit(8, 9, 2, 0, 0, false)}, true},
		{"stale write after a shared grant", []porcupine.Operation{lock(0, 1, 1), lockShared(2, 3, 2), write(4, 5, 1, 1, true)}, false},
		{"fenced read misses a write", []porcupine.Operation{lock(0, 1, 1), write(2, 3, 1, 1, true), lockShared(4, 5, 2), fencedRead(6, 7, 2, 0, 0)}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, porcupine.CheckOperations(registerModel, c.ops))
		})
	}
}

// linLease is the lease of every lock in the linearizability runs: the shortest allowed, so
// that stalls past it are cheap in real time.
const linLease = recordlock.MinLease

// linConfig shapes one concurrent history.
type linConfig struct {
	ops       int     // stop once the history holds this many operations
	clients   int     // goroutines that lock, write, read and release
	stallP    float64 // chance that a holder stalls past its lease before its last writes
	slowP     float64 // chance that a fenced commit stalls past the lease before it writes
	revoke    bool    // a goroutine revokes the current holder's lease at random moments
	skipFence bool    // test-only switch: writes skip Fence (the broken variant)
	txn       bool    // write through Txn.Put and Commit instead of Handle.Fence
	readers   int     // more goroutines that read under a shared lock in a Txn and commit
	// uncheckedReads is a test-only switch: a reader reports its Commit as successful without
	// making it, as a Commit that did not check read locks would (the broken variant).
	uncheckedReads bool
}

// linStats counts what a history exercised, so a run that happened not to stall, revoke or fence
// anything fails rather than passing vacuously.
type linStats struct {
	grants, writes, fencedOut, stalls, stalledWrites, slowCommits, txnStaged, revokes, reads atomic.Int64
	// Of the shared readers: grants, fenced reads, and Commits that succeeded or were refused.
	sharedGrants, fencedReads, readCommits, readCommitsRefused atomic.Int64
}

// linHarness runs clients against real RocksDB through two Lockers of the same database, on the
// system clock, and records every operation with a logical call and return time.
type linHarness struct {
	cfg     linConfig
	db      *grocksdb.DB
	lockers [2]*recordlock.Locker
	wo      *grocksdb.WriteOptions
	ro      *grocksdb.ReadOptions

	tick      atomic.Int64 // logical clock: an operation's call and return are two ticks
	nextG     atomic.Int64
	lastGrant atomic.Int64 // id of the latest holder whose Lock has returned
	current   atomic.Pointer[linHeld]
	stop      atomic.Bool
	firstSlow atomic.Bool

	mu  sync.Mutex
	ops []porcupine.Operation

	stats linStats
}

type linHeld struct {
	g int64
	h *recordlock.Handle
}

var (
	linLockKey = []byte("lin-lock")
	linRegKey  = []byte("lin-register")
)

func (x *linHarness) record(client int, call int64, in regInput, out regOutput) {
	ret := x.tick.Add(1)
	x.mu.Lock()
	x.ops = append(x.ops, porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out})
	if len(x.ops) >= x.cfg.ops {
		x.stop.Store(true)
	}
	x.mu.Unlock()
}

// fail stops the history after a failed check in a client goroutine.
func (x *linHarness) fail() { x.stop.Store(true) }

func (x *linHarness) read(t *testing.T, client int) {
	call := x.tick.Add(1)
	s, err := x.db.Get(x.ro, linRegKey)
	if !assert.NoError(t, err) {
		x.fail()
		return
	}
	var v regVal
	if s.Exists() {
		b := s.Data()
		v = regVal{G: int64(binary.BigEndian.Uint64(b)), Seq: int64(binary.BigEndian.Uint64(b[8:]))}
	}
	s.Free()
	x.record(client, call, regInput{Op: regRead}, regOutput{Val: v})
	x.stats.reads.Add(1)
}

// write stores (g, seq) through h's fence, or straight to RocksDB when the harness is broken.
// A slow commit sleeps past the lease inside Fence before it writes: the lease lapses meanwhile,
// and the key must still not pass to a successor until the commit has returned.
func (x *linHarness) write(t *testing.T, client int, h *recordlock.Handle, g, seq int64, stalled, slow bool) {
	// The first fenced write of a history is always slow, so that every history has one.
	slow = slow || (!x.cfg.skipFence && x.cfg.slowP > 0 && x.firstSlow.CompareAndSwap(false, true))
	put := func() error {
		if slow {
			x.stats.slowCommits.Add(1)
			time.Sleep(linLease + linLease/2)
		}
		return x.db.Put(x.wo, linRegKey, encodeReg(g, seq))
	}
	call := x.tick.Add(1)
	var err error
	if x.cfg.skipFence {
		err = put()
	} else {
		err = h.Fence(put)
	}
	x.countWrite(t, err, stalled)
	x.record(client, call, regInput{Op: regWrite, G: g, Seq: seq}, regOutput{OK: err == nil})
}

// countWrite counts a fenced write's outcome: landed, or refused because the lease had ended (any
// other error fails the run).
func (x *linHarness) countWrite(t *testing.T, err error, stalled bool) {
	t.Helper()
	if err != nil {
		if !assert.ErrorIs(t, err, recordlock.ErrLeaseExpired) {
			x.fail()
		}
		x.stats.fencedOut.Add(1)
		return
	}
	x.stats.writes.Add(1)
	if stalled {
		x.stats.stalledWrites.Add(1)
	}
}

// stall plays a holder that is paused (GC, swap, a slow disk) past its lease: it resumes once a
// successor's Lock has returned, or after three leases when nobody else wanted the key.
func (x *linHarness) stall(g int64) {
	x.stats.stalls.Add(1)
	until := time.Now().Add(3 * linLease)
	for x.lastGrant.Load() <= g && time.Now().Before(until) {
		time.Sleep(time.Millisecond)
	}
}

func (x *linHarness) client(t *testing.T, id int, seed uint64) {
	r := rand.New(rand.NewPCG(seed, uint64(id)))
	l := x.lockers[id%2]
	for !x.stop.Load() {
		if id >= x.cfg.clients {
			x.readerTurn(t, id, l, r)
		} else if x.cfg.txn {
			x.txnTurn(t, id, l, r)
		} else {
			x.fenceTurn(t, id, l, r)
		}
	}
}

// lock records a Lock (through lock) and, when it is granted, gives the holder its id.
func (x *linHarness) lock(t *testing.T, id int, lock func() (*recordlock.Handle, error)) (*recordlock.Handle, int64) {
	call := x.tick.Add(1)
	h, err := lock()
	if err != nil {
		if !assert.ErrorIs(t, err, recordlock.ErrTimeout) {
			x.fail()
		}
		x.record(id, call, regInput{Op: regLock}, regOutput{})
		return nil, 0
	}
	g := x.nextG.Add(1)
	x.record(id, call, regInput{Op: regLock}, regOutput{OK: true, G: g})
	x.lastGrant.Store(g)
	x.current.Store(&linHeld{g: g, h: h})
	x.stats.grants.Add(1)
	return h, g
}

// fenceTurn is one holder's turn with Handle.Fence: lock, one to four reads or fenced writes,
// perhaps a stall past the lease before one of them, release.
func (x *linHarness) fenceTurn(t *testing.T, id int, l *recordlock.Locker, r *rand.Rand) {
	h, g := x.lock(t, id, func() (*recordlock.Handle, error) {
		return l.Lock(context.Background(), linLockKey, recordlock.Options{Lease: linLease, Timeout: 2 * time.Second})
	})
	if h == nil {
		return
	}
	n := 1 + r.IntN(4)
	stallAt := -1
	if r.Float64() < x.cfg.stallP {
		stallAt = r.IntN(n)
	}
	stalled := false
	for i := range n {
		if i == stallAt {
			x.stall(g)
			stalled = true
		}
		if r.IntN(4) == 0 {
			x.read(t, id)
		} else {
			x.write(t, id, h, g, int64(i+1), stalled, !x.cfg.skipFence && r.Float64() < x.cfg.slowP)
		}
	}
	call := x.tick.Add(1)
	ok := h.Release()
	x.record(id, call, regInput{Op: regRelease, G: g}, regOutput{OK: ok})
}

// txnTurn is one holder's turn through a Txn that locks the register's own key: one to three
// staged writes of (g, seq), reads, perhaps a stall past the lease, then Commit, which lands the
// last staged value inside the lock's fence or nothing, and ends the lock either way.
func (x *linHarness) txnTurn(t *testing.T, id int, l *recordlock.Locker, r *rand.Rand) {
	tx := l.Begin()
	defer tx.Rollback()
	h, g := x.lock(t, id, func() (*recordlock.Handle, error) {
		return tx.Lock(context.Background(), linRegKey, recordlock.Options{Lease: linLease, Timeout: 2 * time.Second})
	})
	if h == nil {
		return
	}
	var seq int64
	for i := range 1 + r.IntN(3) {
		if r.IntN(4) == 0 {
			x.read(t, id)
		}
		call := x.tick.Add(1)
		if err := tx.Put(linRegKey, encodeReg(g, int64(i+1))); err != nil {
			// Staging needs a live lease: this one was revoked or lapsed, and nothing was staged.
			if !assert.ErrorIs(t, err, recordlock.ErrLeaseExpired) {
				x.fail()
			}
			x.stats.fencedOut.Add(1)
			x.record(id, call, regInput{Op: regWrite, G: g, Seq: int64(i + 1)}, regOutput{})
			tx.Rollback()
			x.record(id, call, regInput{Op: regEnd, G: g}, regOutput{})
			return
		}
		x.stats.txnStaged.Add(1)
		seq = int64(i + 1)
	}
	stalled := r.Float64() < x.cfg.stallP
	if stalled {
		x.stall(g)
	}
	call := x.tick.Add(1)
	err := tx.Commit()
	x.countWrite(t, err, stalled)
	x.record(id, call, regInput{Op: regWrite, G: g, Seq: seq}, regOutput{OK: err == nil})
	x.record(id, call, regInput{Op: regEnd, G: g}, regOutput{}) // Commit also ended the lock
}

// lockKey is the key the writers lock: the register's own key for Txns, another key for Fence.
func (x *linHarness) lockKey() []byte {
	if x.cfg.txn {
		return linRegKey
	}
	return linLockKey
}

// readerTurn is one reader's turn: a Txn takes the writers' key shared, reads the register inside
// the lock's fence, perhaps stalls past the lease, and commits with nothing staged, which succeeds
// only while its lock still protects what it read.
func (x *linHarness) readerTurn(t *testing.T, id int, l *recordlock.Locker, r *rand.Rand) {
	tx := l.Begin()
	defer tx.Rollback()
	call := x.tick.Add(1)
	h, err := tx.Lock(context.Background(), x.lockKey(), recordlock.Options{Shared: true, Lease: linLease, Timeout: 2 * time.Second})
	if err != nil {
		if !assert.ErrorIs(t, err, recordlock.ErrTimeout) {
			x.fail()
		}
		x.record(id, call, regInput{Op: regLockShared}, regOutput{})
		return
	}
	g := x.nextG.Add(1)
	x.record(id, call, regInput{Op: regLockShared}, regOutput{OK: true, G: g})
	x.stats.sharedGrants.Add(1)

	var v regVal
	call = x.tick.Add(1)
	err = h.Fence(func() error {
		s, err := x.db.Get(x.ro, linRegKey)
		if err != nil {
			return err
		}
		defer s.Free()
		if s.Exists() {
			b := s.Data()
			v = regVal{G: int64(binary.BigEndian.Uint64(b)), Seq: int64(binary.BigEndian.Uint64(b[8:]))}
		}
		return nil
	})
	if err != nil {
		if !assert.ErrorIs(t, err, recordlock.ErrLeaseExpired) {
			x.fail()
		}
		return // nothing was read
	}
	x.record(id, call, regInput{Op: regFencedRead, G: g}, regOutput{Val: v})
	x.stats.fencedReads.Add(1)
	if r.Float64() < 2*x.cfg.stallP {
		x.stallReader(g)
	}
	call = x.tick.Add(1)
	if x.cfg.uncheckedReads {
		x.stats.readCommits.Add(1)
		x.record(id, call, regInput{Op: regReadCommit, G: g, Val: v}, regOutput{OK: true})
		return
	}
	err = tx.Commit()
	if err != nil {
		if !assert.ErrorIs(t, err, recordlock.ErrLeaseExpired) {
			x.fail()
		}
		x.stats.readCommitsRefused.Add(1)
	} else {
		x.stats.readCommits.Add(1)
	}
	x.record(id, call, regInput{Op: regReadCommit, G: g, Val: v}, regOutput{OK: err == nil})
}

// stallReader plays a reader paused past its lease: it resumes once a writer was granted the key
// after it (which needs its lease to lapse) and a write has landed since, or after three leases.
func (x *linHarness) stallReader(g int64) {
	x.stats.stalls.Add(1)
	until := time.Now().Add(3 * linLease)
	for x.lastGrant.Load() <= g && time.Now().Before(until) {
		time.Sleep(time.Millisecond)
	}
	writes := x.stats.writes.Load()
	for x.stats.writes.Load() == writes && time.Now().Before(until) {
		time.Sleep(time.Millisecond)
	}
}

func encodeReg(g, seq int64) []byte {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:], uint64(g))
	binary.BigEndian.PutUint64(b[8:], uint64(seq))
	return b[:]
}

// revoker recalls the current holder's lease at random moments, as a coordinator would.
func (x *linHarness) revoker(client int, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 99))
	for !x.stop.Load() {
		time.Sleep(time.Duration(1+r.IntN(10)) * time.Millisecond)
		cur := x.current.Load()
		if cur == nil {
			continue
		}
		call := x.tick.Add(1)
		cur.h.RevokeLease()
		x.record(client, call, regInput{Op: regRevoke, G: cur.g}, regOutput{})
		x.stats.revokes.Add(1)
	}
}

// runHistory runs one concurrent history and returns it.
func runHistory(t *testing.T, cfg linConfig, seed uint64) (*linHarness, []porcupine.Operation) {
	t.Helper()
	x := &linHarness{cfg: cfg, db: openDB(t)}
	for i := range x.lockers {
		x.lockers[i] = newLocker(t, x.db, recordlock.WithClock(recordlock.SystemClock()))
	}
	x.wo = grocksdb.NewDefaultWriteOptions()
	defer x.wo.Destroy()
	x.ro = grocksdb.NewDefaultReadOptions()
	defer x.ro.Destroy()

	var wg sync.WaitGroup
	for c := range cfg.clients + cfg.readers {
		wg.Go(func() { x.client(t, c, seed) })
	}
	if cfg.revoke {
		wg.Go(func() { x.revoker(cfg.clients+cfg.readers, seed) })
	}
	wg.Wait()
	for i := range x.lockers {
		require.True(t, recordlock.ProbeTableEmpty(x.lockers[i]), "every lock was released or lapsed")
	}
	return x, x.ops
}

// checkHistory returns porcupine's verdict, failing the test if the checker cannot decide.
func checkHistory(t *testing.T, ops []porcupine.Operation) porcupine.CheckResult {
	t.Helper()
	start := time.Now()
	res, _ := porcupine.CheckOperationsVerbose(registerModel, ops, time.Minute)
	t.Logf("check took %v", time.Since(start))
	require.NotEqual(t, porcupine.Unknown, res, "the checker timed out on %d operations", len(ops))
	return res
}

// TestLinearizableFencedRegister runs concurrent histories of a register guarded by a record lock
// on real RocksDB, with 100 ms leases on the system clock, holders stalling past their lease until
// a successor holds the key, and leases revoked from another goroutine. Every history must be
// linearizable against registerModel: no fenced write lands outside its holder's authority.
//
// The system clock is used rather than a ManualClock driven by a goroutine because the race that
// fencing closes is a lease lapsing at an arbitrary instant: between Fence's check and the commit,
// while a runtime timer and a successor's lazy settle compete for the expiry. A ManualClock only
// lapses leases at its Advance calls; real time lapses them anywhere.
func TestLinearizableFencedRegister(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	runs := []struct {
		name string
		cfg  linConfig
	}{
		{"Fence with revocations", linConfig{stallP: 0.06, slowP: 0.01, revoke: true}},
		{"Fence with lapses only", linConfig{stallP: 0.06, slowP: 0.01}},
		{"Txn with revocations", linConfig{stallP: 0.06, revoke: true, txn: true}},
		{"Fence with shared readers", linConfig{stallP: 0.06, slowP: 0.01, readers: 2}},
		{"Txn with shared readers and revocations", linConfig{stallP: 0.06, revoke: true, txn: true, readers: 2}},
	}
	for i, run := range runs {
		t.Run(run.name, func(t *testing.T) {
			cfg := run.cfg
			cfg.ops, cfg.clients = stressCount(2000, 6000), 4
			x, ops := runHistory(t, cfg, seed+uint64(i))
			t.Logf("%d ops: %d grants, %d writes landed, %d fenced out, %d stalls, %d slow commits, %d revocations, %d reads",
				len(ops), x.stats.grants.Load(), x.stats.writes.Load(), x.stats.fencedOut.Load(),
				x.stats.stalls.Load(), x.stats.slowCommits.Load(), x.stats.revokes.Load(), x.stats.reads.Load())
			assert.Equal(t, porcupine.Ok, checkHistory(t, ops), "history is not linearizable")
			// What the history exercised: a run that did not stall, fence out or revoke proves little.
			require.GreaterOrEqual(t, len(ops), cfg.ops)
			require.Positive(t, x.stats.stalls.Load(), "no holder stalled past its lease")
			require.Positive(t, x.stats.fencedOut.Load(), "no write was fenced out")
			require.Positive(t, x.stats.writes.Load())
			assert.Zero(t, x.stats.stalledWrites.Load(), "a holder stalled past its lease still wrote")
			if cfg.slowP > 0 {
				require.Positive(t, x.stats.slowCommits.Load(), "no commit outlived its lease")
			}
			if cfg.revoke {
				require.Positive(t, x.stats.revokes.Load())
			}
			if cfg.readers > 0 {
				t.Logf("shared readers: %d grants, %d fenced reads, %d commits, %d commits refused",
					x.stats.sharedGrants.Load(), x.stats.fencedReads.Load(), x.stats.readCommits.Load(), x.stats.readCommitsRefused.Load())
				require.Positive(t, x.stats.fencedReads.Load())
				require.Positive(t, x.stats.readCommits.Load())
				require.Positive(t, x.stats.readCommitsRefused.Load(), "no reader's Commit was refused after its lease ended")
			}
		})
	}
}

// TestLinearizabilityCatchesUnfencedWrites proves the check has teeth: with the test-only switch
// that makes writes skip Fence, a holder that stalls past its lease writes after its successor's
// Lock returned, and porcupine must reject the history. A single history almost always catches
// it; the loop bounds the retries and the test fails if none does.
func TestLinearizabilityCatchesUnfencedWrites(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const maxRuns = 5
	caught := 0
	runs := 0
	for runs < maxRuns && caught == 0 {
		runs++
		x, ops := runHistory(t, linConfig{ops: 2000, clients: 4, stallP: 0.06, skipFence: true}, seed+uint64(runs))
		require.Zero(t, x.stats.fencedOut.Load(), "the broken variant must not fence")
		if x.stats.stalledWrites.Load() == 0 {
			continue
		}
		if checkHistory(t, ops) == porcupine.Illegal {
			caught++
		}
	}
	t.Logf("caught after %d histories", runs)
	assert.Equal(t, 1, caught, "unfenced writes after a successor's grant went undetected in %d histories", runs)
}

// TestLinearizabilityCatchesUncheckedReads proves the readers' part of the check has teeth: with
// the test-only switch that reports a reader's Commit as successful without checking its shared
// lock, a reader that stalls past its lease "commits" after a writer changed what it read, and
// porcupine must reject the history.
func TestLinearizabilityCatchesUncheckedReads(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const maxRuns = 5
	caught, runs := 0, 0
	for runs < maxRuns && caught == 0 {
		runs++
		_, ops := runHistory(t, linConfig{ops: 1000, clients: 2, readers: 2, stallP: 0.1, uncheckedReads: true}, seed+uint64(runs))
		if checkHistory(t, ops) == porcupine.Illegal {
			caught++
		}
	}
	t.Logf("caught after %d histories", runs)
	assert.Equal(t, 1, caught, "reads committed after their lease ended went undetected in %d histories", runs)
}
