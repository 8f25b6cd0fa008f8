package recordlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"

	"github.com/recordlock/recordlock"
)

// The reference model of FuzzOps. It is written from the documented behaviour (docs/DESIGN.md
// §4–§6, §8, §9 and §15), not from the code: a handle is live until it is released, revoked or
// its monotonic deadline passes; a ManualClock's Advance runs the lease timers that fall due, so
// a lapsed holder gives its key back (and fires its hook) inside the Advance, except inside Fence,
// where the key passes on when commit returns. A key has one exclusive holder or any number of
// shared ones; a Txn's exclusive Lock of a key it holds shared upgrades that handle, at once when
// its share is the only one, and otherwise waits (the model lets such a wait time out, or calls
// it with a done ctx) and leaves the handle shared.

const (
	fzMaxOps     = 160
	fzMaxHandles = 12
)

var fzKeys = [][]byte{[]byte("k0"), []byte("k1"), bytes.Repeat([]byte("long-key/"), 5), nil}

var (
	fzLeases   = []time.Duration{0, recordlock.MinLease, 250 * time.Millisecond, time.Second, 5 * time.Millisecond, recordlock.MaxLease + 1}
	fzTimeouts = []time.Duration{0, recordlock.MinTimeout, time.Second, -1}
	fzScopes   = []recordlock.Scope{recordlock.ScopeDefault, recordlock.ScopeNode, recordlock.ScopeCluster, 9}
	fzAdvances = []time.Duration{0, 1, time.Millisecond, 49 * time.Millisecond, 50 * time.Millisecond, 99 * time.Millisecond,
		100 * time.Millisecond, 250 * time.Millisecond, time.Second, 30 * time.Second, 31 * time.Second, recordlock.MaxLease}
	fzWallSteps    = []time.Duration{1, time.Millisecond, time.Second, time.Hour}
	fzJoinLeases   = []time.Duration{0, -time.Second, recordlock.MinLease, time.Second, 30 * time.Second, 10 * time.Minute}
	fzMintBacks    = []time.Duration{0, time.Millisecond, 100 * time.Millisecond, time.Second, 2 * time.Minute, -time.Second}
	fzTsROffsets   = []time.Duration{0, -time.Hour, time.Millisecond, -1}
	fzUpgradeLease = []time.Duration{0, recordlock.MinLease, 250 * time.Millisecond, time.Second, recordlock.MaxLease,
		5 * time.Millisecond, -1, recordlock.MaxLease + 1}
	errCommit = errors.New("commit failed")
	errHook   = errors.New("hook failed")
)

func pick[T any](xs []T, b byte) T { return xs[int(b)%len(xs)] }

// fzHandle is the model of one Handle.
type fzHandle struct {
	h            *recordlock.Handle
	locker       int
	key          int
	held         bool // one of the table's holders of its key
	shared       bool // a shared lock, until a Txn upgrades it
	released     bool // given back deliberately, by Close, by expiry or by revocation
	revoked      bool // RevokeLease was called
	expired      bool // the lease ended while it was held (lapse or revocation)
	fencing      bool
	deadline     time.Duration
	asked        time.Duration // the lease of the lock or of the last upgrade, as asked: a round's bound
	hold         bool
	cluster      bool
	tsR          recordlock.Timestamp
	acquired     recordlock.Timestamp
	expires      int64         // ExpiresAt in wall Unix nanoseconds
	roundEnd     time.Duration // the joined round's deadline and ExpiresAt
	roundExpires int64
	lastVer      recordlock.Timestamp
	hasVer       bool
	floor        recordlock.Timestamp
	armed        int            // index into fired of the armed release hook, -1 for none
	fired        []atomic.Int32 // calls of each hook ever passed to JoinClusterRound
	want         []int32        // calls each hook should have had
}

type fzModel struct {
	t       *testing.T
	clk     *recordlock.ManualClock
	db      *grocksdb.DB
	wo      *grocksdb.WriteOptions
	lockers [2]*recordlock.Locker
	probe   *recordlock.Locker // takes and gives back keys to see who holds what
	closed  [2]bool
	mono    time.Duration
	wall    time.Time
	lastTs  int64
	holders [3][]int // indices of the handles holding each key
	hs      []*fzHandle
	txns    [2]*fzTxn // the Txns of the Txn operations, nil before the first
	trace   []string
}

// fzTxn is the model of one Txn: which handle it holds each key with.
type fzTxn struct {
	txn    *recordlock.Txn
	locker int
	held   map[int]int // key → handle index
}

func (m *fzModel) fatalf(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("%s\nlast operations, oldest first:\n  %s", fmt.Sprintf(format, args...),
		strings.Join(m.trace[max(0, len(m.trace)-16):], "\n  "))
}

func (m *fzModel) expect(ok bool, format string, args ...any) {
	m.t.Helper()
	if !ok {
		m.fatalf(format, args...)
	}
}

// expectErr checks that err is nil when wants is empty, and otherwise matches one of wants (the
// documented behaviour does not rank simultaneous failures).
func (m *fzModel) expectErr(what string, err error, wants ...error) {
	m.t.Helper()
	if len(wants) == 0 {
		m.expect(err == nil, "%s: unexpected error %v", what, err)
		return
	}
	for _, w := range wants {
		if errors.Is(err, w) {
			return
		}
	}
	m.fatalf("%s: got error %v, want one of %v", what, err, wants)
}

func (m *fzModel) mint() recordlock.Timestamp {
	m.lastTs = max(m.wall.UnixNano(), m.lastTs+1)
	return recordlock.Timestamp(m.lastTs)
}

func (x *fzHandle) lapsed(mono time.Duration) bool { return mono >= x.deadline }

// leaseOver is IsLeaseExpired: the lease ended by lapse or revocation.
func (m *fzModel) leaseOver(x *fzHandle) bool { return x.expired || x.revoked || x.lapsed(m.mono) }

// dead is IsExpired: the handle authorizes no new write.
func (m *fzModel) dead(x *fzHandle) bool { return x.released || m.leaseOver(x) }

func (m *fzModel) fireHook(x *fzHandle) {
	if x.armed >= 0 {
		x.want[x.armed]++
		x.armed = -1
	}
}

func (m *fzModel) giveBack(x *fzHandle) {
	x.held = false
	hs := m.holders[x.key]
	for i, j := range hs {
		if m.hs[j] == x {
			m.holders[x.key] = append(hs[:i:i], hs[i+1:]...)
			break
		}
	}
	m.fireHook(x)
}

// busyFor reports whether a request for key k in the given mode must wait: an exclusive one for
// any holder, a shared one for an exclusive holder.
func (m *fzModel) busyFor(k int, shared bool) bool {
	for _, j := range m.holders[k] {
		if !shared || !m.hs[j].shared {
			return true
		}
	}
	return false
}

// endLease ends a held handle's lease (lapse or revocation): it stops authorizing at once, and
// its key passes on now or, inside Fence, when commit returns.
func (m *fzModel) endLease(x *fzHandle) {
	x.expired, x.released = true, true
	if x.held && !x.fencing {
		m.giveBack(x)
	}
}

// advance moves the clock and runs the lease timers that fall due.
func (m *fzModel) advance(d time.Duration) {
	m.clk.Advance(d)
	m.mono += d
	m.wall = m.wall.Add(d)
	for _, x := range m.hs {
		if x.held && !x.expired && x.lapsed(m.mono) {
			m.endLease(x)
		}
	}
}

func (m *fzModel) stepWall(d time.Duration) {
	m.clk.StepWall(d)
	m.wall = m.wall.Add(d)
}

// probeKey finds out through the probe Locker whether key k is held, and in which mode, and
// checks the model agrees.
func (m *fzModel) probeKey(k int) {
	for _, shared := range []bool{false, true} {
		h, err := m.probe.TryLock(fzKeys[k], recordlock.Options{Scope: recordlock.ScopeNode, Shared: shared})
		if m.busyFor(k, shared) {
			m.expectErr(fmt.Sprintf("probe (shared=%v) of k%d held by %v", shared, k, m.holders[k]), err, recordlock.ErrLocked)
			continue
		}
		m.expectErr(fmt.Sprintf("probe (shared=%v) of k%d held by %v", shared, k, m.holders[k]), err)
		want := m.mint()
		m.expect(h.AcquiredAt() == want, "probe AcquiredAt %d, want %d", h.AcquiredAt(), want)
		m.expect(h.Release(), "probe Release returned false")
	}
}

// checkLocks compares Locks with the model: one entry per holder, in its mode.
func (m *fzModel) checkLocks() {
	var got [3][2]int // per key: exclusive, shared holders
	for info := range m.probe.Locks() {
		for k, key := range fzKeys[:3] {
			if bytes.Equal(info.Key, key) {
				if info.Shared {
					got[k][1]++
				} else {
					got[k][0]++
				}
			}
		}
	}
	for k := range got {
		var want [2]int
		for _, j := range m.holders[k] {
			if m.hs[j].shared {
				want[1]++
			} else {
				want[0]++
			}
		}
		m.expect(got[k] == want, "Locks of k%d: %d exclusive and %d shared holders, want %v", k, got[k][0], got[k][1], want)
	}
}

// check compares every observable of every handle, then who holds each key. Hook counts come
// first because they are the only observation that cannot itself complete an expiry.
func (m *fzModel) check() {
	m.t.Helper()
	for i, x := range m.hs {
		for j := range x.want {
			got := x.fired[j].Load()
			m.expect(got == x.want[j], "h%d hook %d fired %d times, want %d", i, j, got, x.want[j])
		}
	}
	for i, x := range m.hs {
		h := x.h
		m.expect(h.IsLeaseExpired() == m.leaseOver(x), "h%d IsLeaseExpired=%v", i, !m.leaseOver(x))
		m.expect(h.IsExpired() == m.dead(x), "h%d IsExpired=%v", i, !m.dead(x))
		select {
		case <-h.Done():
			m.expect(m.dead(x), "h%d Done closed while live", i)
		default:
			m.expect(!m.dead(x), "h%d Done open while dead", i)
		}
		m.expect(bytes.Equal(h.Key(), fzKeys[x.key]), "h%d Key %q", i, h.Key())
		m.expect(h.Hold() == x.hold, "h%d Hold=%v", i, h.Hold())
		m.expect(h.Shared() == x.shared, "h%d Shared=%v", i, h.Shared())
		m.expect(h.AcquiredAt() == x.acquired, "h%d AcquiredAt %d, want %d", i, h.AcquiredAt(), x.acquired)
		m.expect(h.ExpiresAt().UnixNano() == x.expires, "h%d ExpiresAt %d, want %d", i, h.ExpiresAt().UnixNano(), x.expires)
		tsR, ok := h.ClusterTsR()
		m.expect(ok == x.cluster && tsR == x.tsR, "h%d ClusterTsR (%d,%v), want (%d,%v)", i, tsR, ok, x.tsR, x.cluster)
		wantScope := recordlock.ScopeNode
		if x.cluster {
			wantScope = recordlock.ScopeCluster
		}
		m.expect(h.Scope() == wantScope, "h%d Scope %v", i, h.Scope())
		m.expect(h.Token() == 0, "h%d Token %d", i, h.Token())
	}
	m.checkLocks()
	for k := range m.holders {
		m.probeKey(k)
	}
}

// fzReader decodes the fuzz input; past its end it reads zeros.
type fzReader struct {
	b []byte
	i int
}

func (r *fzReader) next() byte {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return r.b[r.i-1]
}

func (m *fzModel) handle(b byte) (int, *fzHandle) {
	if len(m.hs) == 0 {
		return -1, nil
	}
	i := int(b) % len(m.hs)
	return i, m.hs[i]
}

// lock runs TryLock (mode 0), Lock on a key the model says is free (mode 1; TryLock when it is
// busy) or Lock with a ctx already cancelled (mode 2).
func (m *fzModel) lock(mode int, a, o byte) {
	li, k, shared := int(a&1), int(a>>1)%len(fzKeys), (a>>3)&1 == 1
	opts := recordlock.Options{Lease: pick(fzLeases, o), Scope: pick(fzScopes, o/6), Hold: (o/24)%2 == 1, Timeout: pick(fzTimeouts, o/48), Shared: shared}
	var wants []error
	if !validDuration(opts.Lease, recordlock.MinLease, recordlock.MaxLease) || !validDuration(opts.Timeout, recordlock.MinTimeout, recordlock.MaxTimeout) || opts.Scope > recordlock.ScopeNode {
		wants = append(wants, recordlock.ErrInvalidOptions)
	}
	if len(fzKeys[k]) == 0 {
		wants = append(wants, recordlock.ErrInvalidKey)
	}
	if m.closed[li] {
		wants = append(wants, recordlock.ErrClosed)
	}
	ctx := context.Background()
	if mode == 2 {
		c, cancel := context.WithCancel(ctx)
		cancel()
		ctx = c
		wants = append(wants, context.Canceled)
	}
	if opts.Scope == recordlock.ScopeCluster {
		wants = append(wants, recordlock.ErrClusterUnavailable)
	}
	busy := len(wants) == 0 && m.busyFor(k, shared)
	if busy && mode == 1 {
		mode = 0
	}
	if busy {
		wants = append(wants, recordlock.ErrLocked)
	}
	if len(wants) == 0 && len(m.hs) >= fzMaxHandles {
		return // keep the per-op checks cheap
	}
	m.trace = append(m.trace, fmt.Sprintf("lock mode=%d L%d k%d %+v", mode, li, k, opts))
	var h *recordlock.Handle
	var err error
	if mode == 0 {
		h, err = m.lockers[li].TryLock(fzKeys[k], opts)
	} else {
		// The model says Lock will not wait; the deadline only turns a wrong model into a failure
		// instead of a hang.
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		h, err = m.lockers[li].Lock(c, fzKeys[k], opts)
		cancel()
	}
	m.expectErr("lock", err, wants...)
	if err != nil {
		m.expect(h == nil, "a failed lock returned a handle")
		return
	}
	lease := cmpOr(opts.Lease, recordlock.DefaultLease)
	m.add(&fzHandle{h: h, locker: li, key: k, held: true, shared: shared, deadline: m.mono + lease, asked: lease, hold: opts.Hold,
		acquired: m.mint(), expires: m.wall.Add(lease).UnixNano(), armed: -1})
}

// add records x, a handle just granted, as a holder of its key.
func (m *fzModel) add(x *fzHandle) int {
	m.holders[x.key] = append(m.holders[x.key], len(m.hs))
	m.hs = append(m.hs, x)
	return len(m.hs) - 1
}

func (m *fzModel) release(b byte) {
	i, x := m.handle(b)
	if x == nil {
		return
	}
	m.trace = append(m.trace, fmt.Sprintf("release h%d", i))
	want := !m.dead(x)
	got := x.h.Release()
	m.expect(got == want, "Release returned %v", got)
	if want {
		x.released = true
		m.giveBack(x)
	}
}

func (m *fzModel) revoke(b byte) {
	i, x := m.handle(b)
	if x == nil {
		return
	}
	m.trace = append(m.trace, fmt.Sprintf("revoke h%d", i))
	x.h.RevokeLease()
	x.revoked = true
	if x.held && !x.expired {
		m.endLease(x)
	}
}

func (m *fzModel) join(b, a, c byte) {
	i, x := m.handle(b)
	if x == nil {
		return
	}
	tsR := recordlock.Timestamp(m.wall.Add(pick(fzTsROffsets, a)).UnixNano())
	lease := pick(fzJoinLeases, a/4)
	minted := m.mono - pick(fzMintBacks, c)
	hookKind := (c / 8) % 3
	m.trace = append(m.trace, fmt.Sprintf("join h%d tsR=%d lease=%v minted=%v hook=%d", i, tsR, lease, minted, hookKind))
	idx := len(x.want)
	if idx >= 8 {
		return
	}
	x.want = append(x.want, 0)
	if x.fired == nil {
		x.fired = make([]atomic.Int32, 8)
	}
	counter := &x.fired[idx]
	hook := func() error {
		counter.Add(1)
		switch hookKind {
		case 1:
			return errHook
		case 2:
			panic("hook panicked")
		}
		return nil
	}
	want := !m.dead(x) && lease-(m.mono-minted) > 0 && lease <= x.asked
	got := x.h.JoinClusterRound(tsR, lease, minted, hook)
	m.expect(got == want, "JoinClusterRound returned %v", got)
	if !want {
		return
	}
	x.cluster, x.tsR, x.acquired, x.hasVer = true, tsR, tsR, false
	x.expires = tsR.Time().Add(lease).UnixNano()
	x.deadline = minted + lease
	x.roundEnd, x.roundExpires = x.deadline, x.expires
	x.armed = idx
}

func (m *fzModel) upgrade(b, a byte) {
	i, x := m.handle(b)
	if x == nil {
		return
	}
	lease := pick(fzUpgradeLease, a)
	m.trace = append(m.trace, fmt.Sprintf("upgrade h%d lease=%v", i, lease))
	var wants []error
	if !validDuration(lease, recordlock.MinLease, recordlock.MaxLease) {
		wants = append(wants, recordlock.ErrInvalidOptions)
	}
	switch {
	case x.expired || x.revoked:
		wants = append(wants, recordlock.ErrLeaseExpired)
	case x.released && x.lapsed(m.mono):
		wants = append(wants, recordlock.ErrLeaseExpired, recordlock.ErrReleased) // a released handle past its deadline may report either
	case x.released:
		wants = append(wants, recordlock.ErrReleased)
	}
	err := x.h.UpgradeToHold(lease)
	m.expectErr("UpgradeToHold", err, wants...)
	if len(wants) > 0 {
		return
	}
	// The new lease runs from now, but under a round no further than the round's deadline; then
	// ExpiresAt is the round's too (docs/DESIGN.md §8.3).
	lease = cmpOr(lease, recordlock.DefaultLease)
	x.asked = lease
	if x.cluster && x.roundEnd <= m.mono+lease {
		x.deadline, x.expires = x.roundEnd, x.roundExpires
	} else {
		x.deadline, x.expires = m.mono+lease, m.wall.Add(lease).UnixNano()
	}
	x.hold = true
	m.nextVersion(x)
}

func (m *fzModel) candidate(x *fzHandle, floor recordlock.Timestamp) recordlock.Timestamp {
	v := max(x.acquired, x.floor, floor)
	if x.hasVer {
		v = max(v, x.lastVer+1)
	}
	return v
}

func (m *fzModel) nextVersion(x *fzHandle) recordlock.Timestamp {
	v := m.candidate(x, 0)
	x.lastVer, x.hasVer = v, true
	return v
}

func (m *fzModel) fence(b, a byte) {
	i, x := m.handle(b)
	if x == nil {
		return
	}
	variant := a % 4
	adv := pick(fzAdvances, a/4)
	m.trace = append(m.trace, fmt.Sprintf("fence h%d variant=%d advance=%v", i, variant, adv))
	called := false
	var commitErr error
	commit := func() error {
		called = true
		if err := m.db.Put(m.wo, []byte("fenced"), []byte{a}); err != nil {
			return err
		}
		switch variant {
		case 1:
			commitErr = errCommit
		case 2:
			// The lease may lapse while commit runs: authority ends at once, the key stays put.
			m.trace = append(m.trace, fmt.Sprintf("  advance %v inside fence", adv))
			m.advance(adv)
			m.check()
		case 3:
			m.trace = append(m.trace, "  step wall -1h inside fence")
			m.stepWall(-time.Hour)
			m.check()
		}
		return commitErr
	}
	wantRun := !m.leaseOver(x)
	if wantRun && m.closed[x.locker] {
		// Close released the key and waits for no fence begun after it: none may run.
		err := x.h.Fence(commit)
		m.expect(!called, "commit ran on a closed Locker's handle")
		m.expectErr("Fence", err, recordlock.ErrClosed)
		return
	}
	if wantRun {
		x.fencing = true
	}
	err := x.h.Fence(commit)
	x.fencing = false
	m.expect(called == wantRun, "commit ran=%v", called)
	if !wantRun {
		m.expectErr("Fence", err, recordlock.ErrLeaseExpired)
		return
	}
	m.expect(errors.Is(err, commitErr) && (err == nil) == (commitErr == nil), "Fence returned %v, want commit's %v", err, commitErr)
	if x.expired && x.held {
		m.giveBack(x) // the lease ended inside commit: the key passes on now
	}
}

func (m *fzModel) versions(b, a, c byte) {
	i, x := m.handle(b)
	if x == nil {
		return
	}
	delta := time.Duration(int8(c))
	if c&1 == 1 {
		delta *= time.Millisecond
	}
	v := x.acquired + recordlock.Timestamp(delta)
	m.trace = append(m.trace, fmt.Sprintf("versions h%d op=%d v=%d", i, a%5, v))
	switch a % 5 {
	case 0:
		want := m.nextVersion(x)
		got := x.h.NextHolderVersion()
		m.expect(got == want, "NextHolderVersion %d, want %d", got, want)
	case 1:
		want := m.candidate(x, v)
		got := x.h.HolderVersionCandidate(v)
		m.expect(got == want, "HolderVersionCandidate(%d) %d, want %d", v, got, want)
	case 2:
		x.h.NoteCandidateFloor(v)
		x.floor = max(x.floor, v)
	case 3:
		x.h.NoteHolderVersion(v)
		if !x.hasVer || v > x.lastVer {
			x.lastVer, x.hasVer = v, true
		}
	case 4:
		want := m.mint()
		got := m.lockers[(a/5)&1].Timestamp()
		m.expect(got == want, "Timestamp %d, want %d", got, want)
	}
}

func (m *fzModel) close(a byte) {
	li := int(a & 1)
	m.trace = append(m.trace, fmt.Sprintf("close L%d", li))
	m.expect(m.lockers[li].Close() == nil, "Close failed")
	if m.closed[li] {
		return
	}
	m.closed[li] = true
	for _, x := range m.hs {
		if x.locker == li && x.held {
			x.released = true
			m.giveBack(x)
		}
	}
}

// txnLock runs Txn.Lock of a key in one of two Txns (begun on the first use of the slot, or again
// after it ended): a fresh lock when the Txn does not hold the key live (only when the model says
// it will not wait), the handle it has for a shared request or for an exclusive request of a key
// it holds exclusively, and an upgrade for an exclusive request of a key it holds shared. An
// upgrade that must wait for other sharers is either called with a done ctx or left to time out
// after 1 ms on the clock; either way the handle is left shared and unchanged.
func (m *fzModel) txnLock(a, o byte) {
	ti, shared, doneCtx, k := int(a&1), (a>>1)&1 == 1, (a>>2)&1 == 1, int(a>>3)%3
	opts := recordlock.Options{Lease: pick(fzLeases[:4], o), Scope: recordlock.ScopeNode, Shared: shared, Timeout: recordlock.MinTimeout}
	x := m.txns[ti]
	if x == nil {
		x = &fzTxn{txn: m.lockers[ti].Begin(), locker: ti, held: map[int]int{}}
		m.txns[ti] = x
	}
	m.trace = append(m.trace, fmt.Sprintf("txn%d lock k%d shared=%v doneCtx=%v %+v", ti, k, shared, doneCtx, opts))
	ctx := context.Background()
	if doneCtx {
		c, cancel := context.WithCancel(ctx)
		cancel()
		ctx = c
	}
	lock := func() (*recordlock.Handle, error) { return x.txn.Lock(ctx, fzKeys[k], opts) }
	j, holds := x.held[k]
	var cur *fzHandle
	if holds && !m.dead(m.hs[j]) {
		cur = m.hs[j]
	}
	switch {
	case m.closed[x.locker]:
		_, err := lock()
		m.expectErr("txn lock on a closed Locker", err, recordlock.ErrClosed)
	case doneCtx:
		_, err := lock()
		m.expectErr("txn lock with a done ctx", err, context.Canceled)
	case cur != nil && (shared || !cur.shared):
		h, err := lock()
		m.expectErr("txn re-entry", err)
		m.expect(h == cur.h, "txn re-entry returned another handle")
	case cur != nil:
		others := false
		soon := cur.lapsed(m.mono + time.Millisecond)
		for _, o := range m.holders[k] {
			if o != j {
				others = true
				soon = soon || m.hs[o].lapsed(m.mono+time.Millisecond)
			}
		}
		if !others {
			h, err := lock()
			m.expectErr("upgrade of the sole sharer", err)
			m.expect(h == cur.h, "the upgrade returned another handle")
			cur.shared = false
			return
		}
		if soon {
			return // a lapse within the wait would race with its timeout
		}
		res := make(chan error, 1)
		go func() { _, err := lock(); res <- err }()
		deadline := time.Now().Add(10 * time.Second)
		for recordlock.ProbeQueuedWaiters(m.probe, fzKeys[k]) == 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Microsecond)
		}
		m.expect(recordlock.ProbeQueuedWaiters(m.probe, fzKeys[k]) == 1, "the upgrade did not queue")
		m.trace = append(m.trace, "  advance 1ms: the upgrade times out")
		m.advance(time.Millisecond)
		select {
		case err := <-res:
			m.expectErr("upgrade behind other sharers", err, recordlock.ErrTimeout)
		case <-time.After(10 * time.Second):
			m.fatalf("the upgrade did not time out")
		}
	case m.busyFor(k, shared):
		// Txn.Lock would wait for the key; the model has no waits of fresh locks.
	case len(m.hs) >= fzMaxHandles:
	default:
		h, err := lock()
		m.expectErr("txn lock", err)
		if err != nil {
			return
		}
		lease := cmpOr(opts.Lease, recordlock.DefaultLease)
		x.held[k] = m.add(&fzHandle{h: h, locker: x.locker, key: k, held: true, shared: shared, deadline: m.mono + lease,
			asked: lease, acquired: m.mint(), expires: m.wall.Add(lease).UnixNano(), armed: -1})
	}
}

// txnEnd rolls back the Txn of a slot: each of its locks that is still live is released.
func (m *fzModel) txnEnd(a byte) {
	ti := int(a & 1)
	x := m.txns[ti]
	if x == nil {
		return
	}
	m.trace = append(m.trace, fmt.Sprintf("txn%d rollback", ti))
	x.txn.Rollback()
	for _, j := range x.held {
		if h := m.hs[j]; !h.hold && !m.dead(h) {
			h.released = true
			m.giveBack(h)
		}
	}
	m.txns[ti] = nil
}
