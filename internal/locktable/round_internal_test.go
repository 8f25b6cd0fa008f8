package locktable

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The operations that move a live lease (round.go) and stamp versions (versions.go), through
// the methods the API calls.

var roundStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Joining a round re-anchors the claim to it exactly, and its hook fires once at the round's
// deadline, when the key passes on.
func TestJoinRoundReanchorsTheHold(t *testing.T) {
	clk := NewManualClock(roundStart)
	l := newTestLocker(t, newTestTable(t), clk)
	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Minute})
	require.NoError(t, err)
	h.NextVersion()
	minted := clk.Mono()
	clk.Advance(time.Second)
	var fired atomic.Int32
	const tsR = int64(1_000_000)
	require.True(t, h.JoinRound(Round{TsR: tsR, Token: 7, MintedMono: minted, Lease: 10 * time.Second,
		Hook: func() error { fired.Add(1); return nil }}))

	s := h.Snapshot()
	assert.True(t, s.Cluster())
	assert.Equal(t, tsR, s.AcquiredAt)
	assert.Equal(t, tsR, s.TsR)
	assert.True(t, s.HasTsR)
	assert.Equal(t, uint64(7), s.Token)
	assert.Equal(t, minted+10*time.Second, s.Deadline, "the deadline is MintedMono+Lease")
	assert.Equal(t, tsR+int64(10*time.Second), s.ExpiresAt, "ExpiresAt is TsR+Lease")
	assert.Equal(t, tsR, h.VersionCandidate(0), "joining restarts the version counter")

	got := lockAsync(context.Background(), l, []byte("k"), testOptions{Timeout: time.Minute})
	WaitQueued(t, l, []byte("k"), 1)
	clk.Advance(8 * time.Second) // one second short of the round's deadline
	assert.Zero(t, fired.Load())
	clk.Advance(time.Second)
	res := testutil.Await(t, got, "the key, at the round's deadline")
	require.NoError(t, res.err)
	assert.Equal(t, int32(1), fired.Load(), "the round's hook fires once, at its deadline")
	assert.True(t, h.Now().Expired())
	require.True(t, res.h.Release())
}

// A round is refused, and changes nothing, when it asks for more lease than the lock did, when
// its lease is over already, or when the claim is dead.
func TestJoinRoundRefuses(t *testing.T) {
	clk := NewManualClock(roundStart)
	l := newTestLocker(t, newTestTable(t), clk)
	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Minute})
	require.NoError(t, err)
	state := func() Snapshot {
		s := h.Snapshot()
		s.Remaining = 0 // it runs down as the clock moves
		return s
	}
	before := state()
	hook := func() error { t.Error("a refused round's hook ran"); return nil }

	assert.False(t, h.JoinRound(Round{TsR: 5, MintedMono: clk.Mono(), Lease: time.Minute + 1, Hook: hook}),
		"longer than the lock asked for")
	minted := clk.Mono()
	clk.Advance(2 * time.Second)
	assert.False(t, h.JoinRound(Round{TsR: 5, MintedMono: minted, Lease: 2 * time.Second, Hook: hook}),
		"over by the time it is joined")
	assert.Equal(t, before, state(), "a refused round changes nothing")

	require.True(t, h.JoinRound(Round{TsR: 5, MintedMono: clk.Mono(), Lease: time.Minute}), "as long as asked")
	require.True(t, h.Release())
	assert.False(t, h.JoinRound(Round{TsR: 6, MintedMono: clk.Mono(), Lease: time.Second, Hook: hook}), "released")
	assert.True(t, ProbeTableEmpty(l))
}

// Extend sets the lease to run from now, shorter or longer than what was left; under a round it
// is clamped to the round's deadline and ExpiresAt.
func TestExtendRunsTheLeaseFromNow(t *testing.T) {
	clk := NewManualClock(roundStart)
	l := newTestLocker(t, newTestTable(t), clk)
	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Minute})
	require.NoError(t, err)
	clk.Advance(time.Second)

	_, err = h.Extend(time.Second, false)
	require.NoError(t, err)
	s := h.Snapshot()
	assert.Equal(t, clk.Mono()+time.Second, s.Deadline, "a shorter lease shortens it")
	assert.Equal(t, roundStart.Add(2*time.Second).UnixNano(), s.ExpiresAt)
	assert.Equal(t, time.Second, s.AskedLease)
	assert.False(t, s.Hold())

	_, err = h.Extend(time.Hour, false)
	require.NoError(t, err)
	assert.Equal(t, clk.Mono()+time.Hour, h.Snapshot().Deadline)

	// A round of 10 s caps every later extension, even one back from a shorter lease.
	const tsR = int64(1_000)
	require.True(t, h.JoinRound(Round{TsR: tsR, MintedMono: clk.Mono(), Lease: 10 * time.Second}))
	roundEnd := clk.Mono() + 10*time.Second
	_, err = h.Extend(time.Second, false)
	require.NoError(t, err)
	assert.Equal(t, clk.Mono()+time.Second, h.Snapshot().Deadline, "shortened below the round")
	_, err = h.Extend(time.Minute, false)
	require.NoError(t, err)
	s = h.Snapshot()
	assert.Equal(t, roundEnd, s.Deadline, "clamped to the round")
	assert.Equal(t, tsR+int64(10*time.Second), s.ExpiresAt, "ExpiresAt clamped with it")
	assert.Equal(t, time.Minute, s.AskedLease, "the lease asked for is kept as asked")

	clk.Advance(10 * time.Second)
	_, err = h.Extend(time.Minute, false)
	assert.ErrorIs(t, err, ErrLeaseExpired, "a lapsed lease is not revived")
	require.True(t, h.Now().Expired())
	assert.True(t, ProbeTableEmpty(l))
}

// Extend with outlive makes the claim outlive its owner and issues a version; its Undo puts back
// all it changed, and a deadline put back that has passed ends the lease at once.
func TestExtendUndo(t *testing.T) {
	clk := NewManualClock(roundStart)
	l := newTestLocker(t, newTestTable(t), clk)
	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Second})
	require.NoError(t, err)
	before := h.Snapshot()
	candidate := h.VersionCandidate(0)

	u, err := h.Extend(time.Minute, true)
	require.NoError(t, err)
	s := h.Snapshot()
	assert.True(t, s.Hold())
	assert.Equal(t, time.Minute, s.AskedLease)
	assert.Equal(t, candidate+1, h.VersionCandidate(0), "outliving issued one version")
	u.Undo()
	assert.Equal(t, before, h.Snapshot(), "the undo puts back lease, ExpiresAt, lease asked for and Hold")
	assert.Equal(t, candidate, h.VersionCandidate(0), "and the version counter")

	u, err = h.Extend(time.Minute, true)
	require.NoError(t, err)
	got := lockAsync(context.Background(), l, []byte("k"), testOptions{Timeout: time.Minute})
	WaitQueued(t, l, []byte("k"), 1)
	clk.Advance(2 * time.Second)
	require.False(t, h.Now().Dead(), "extended, the lease lasts")
	u.Undo()
	assert.True(t, h.Status().Expired(), "the deadline put back had passed: the lease ended at once")
	res := testutil.Await(t, got, "the waiter's grant") // no clock moved: only the undo passed the key on
	require.NoError(t, res.err)
	require.True(t, res.h.Release())
	Undo{}.Undo() // the zero Undo does nothing
}

// AwaitRound keeps a live holder's key until the deadline it is given, and refuses a dead claim.
func TestAwaitRoundMovesTheDeadline(t *testing.T) {
	clk := NewManualClock(roundStart)
	l := newTestLocker(t, newTestTable(t), clk)
	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Second})
	require.NoError(t, err)
	require.True(t, h.AwaitRound(clk.Mono()+time.Minute))
	clk.Advance(30 * time.Second)
	assert.False(t, h.Now().Dead())
	assert.Equal(t, time.Second, h.Snapshot().AskedLease, "the lease asked for is unchanged")
	clk.Advance(30 * time.Second)
	assert.True(t, h.Now().Expired())
	assert.False(t, h.AwaitRound(clk.Mono()+time.Minute), "a lapsed claim is not revived")
}

// Version stamps: the candidate is max(last issued + 1, or AcquiredAt; the floor; the caller's
// floor); noting a version never lowers the last one.
func TestStampVersions(t *testing.T) {
	clk := NewManualClock(roundStart)
	l := newTestLocker(t, newTestTable(t), clk)
	h, err := l.TryLock([]byte("k"), testOptions{})
	require.NoError(t, err)
	at := h.Snapshot().AcquiredAt
	require.NotZero(t, at)

	assert.Equal(t, at, h.VersionCandidate(0), "none issued: AcquiredAt")
	assert.Equal(t, at+5, h.VersionCandidate(at+5), "at least the caller's floor")
	assert.Equal(t, at, h.VersionCandidate(0), "peeking records nothing")
	assert.Equal(t, at, h.NextVersion())
	assert.Equal(t, at+1, h.NextVersion())
	h.RaiseVersionFloor(at + 10)
	assert.Equal(t, at+10, h.VersionCandidate(0), "the candidate floor")
	h.RaiseVersionFloor(at + 3)
	assert.Equal(t, at+10, h.VersionCandidate(0), "a floor is never lowered")
	h.NoteVersion(at + 20)
	assert.Equal(t, at+21, h.VersionCandidate(0))
	h.NoteVersion(at + 2)
	assert.Equal(t, at+21, h.VersionCandidate(0), "noting never lowers the last issued")
	assert.Equal(t, at+21, h.NextVersion())
	require.True(t, h.Release())
}

// A lease that lapses inside a fence ends the claim's authority at once, and the key passes on
// only when the commit returns; a fence on a lapsed lease does not run its commit.
func TestFenceUnderExpiry(t *testing.T) {
	clk := NewManualClock(roundStart)
	l := newTestLocker(t, newTestTable(t), clk)
	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Second})
	require.NoError(t, err)
	got := lockAsync(context.Background(), l, []byte("k"), testOptions{Timeout: time.Minute})
	WaitQueued(t, l, []byte("k"), 1)
	errCommit := errors.New("the commit's own error")
	err = h.Fence(func() error {
		clk.Advance(time.Second)
		assert.True(t, h.Now().Expired(), "lapsed inside the fence")
		assert.True(t, testutil.Closed(h.Done()), "Done closes at the lapse")
		select {
		case res := <-got:
			t.Errorf("the key passed on inside the fence: %v", res.err)
		case <-time.After(20 * time.Millisecond):
		}
		return errCommit
	})
	assert.ErrorIs(t, err, errCommit, "Fence returns the commit's error")
	res := testutil.Await(t, got, "the key, once the commit returned")
	require.NoError(t, res.err)

	err = h.Fence(func() error { t.Error("a fence ran its commit on a lapsed lease"); return nil })
	assert.ErrorIs(t, err, ErrLeaseExpired)
	require.True(t, res.h.Release())
}

// FenceTrustedThenRelease releases a lock that does not outlive its owner as it ends, and
// keeps one that does.
func TestFenceReleasesUnlessHold(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(roundStart))
	plain, err := l.TryLock([]byte("a"), testOptions{})
	require.NoError(t, err)
	held, err := l.TryLock([]byte("b"), testOptions{Hold: true})
	require.NoError(t, err)
	ran := 0
	commit := func() error { ran++; return nil }
	require.NoError(t, plain.FenceTrustedThenRelease(commit))
	require.NoError(t, held.FenceTrustedThenRelease(commit))
	assert.Equal(t, 2, ran)
	assert.True(t, plain.Status().Released())
	assert.False(t, held.Status().Dead())
	require.True(t, held.Release())
}

// Disown releases a live lock unless it outlives its owner, and with release whatever it is;
// either way the claim has no owner after it.
func TestDisown(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(roundStart))
	txn := l.Begin()
	plain, err := txn.Lock(context.Background(), []byte("a"), testOptions{})
	require.NoError(t, err)
	held, err := txn.Lock(context.Background(), []byte("b"), testOptions{Hold: true})
	require.NoError(t, err)
	plain.Disown(false)
	held.Disown(false)
	assert.True(t, plain.Status().Released())
	assert.False(t, held.Status().Dead(), "a lock that outlives its owner is kept")
	assert.Nil(t, held.Snapshot().Owner)
	held.Disown(true)
	assert.True(t, held.Status().Released())
	assert.True(t, ProbeTableEmpty(l))
}

// Now settles a lapse it finds: the key goes back before it reports the lease ended. Status, read
// without the mutex, does not see a lapse nothing settled yet.
func TestNowSettlesALapse(t *testing.T) {
	clk := NewManualClock(roundStart)
	l := newTestLocker(t, newTestTable(t), clk)
	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Second})
	require.NoError(t, err)
	assert.Equal(t, time.Second, h.Snapshot().Remaining)
	clk.Advance(time.Second)
	assert.False(t, h.Status().Dead(), "nothing settled the lapse yet")
	assert.Zero(t, h.Snapshot().Remaining)
	s := h.Now()
	assert.True(t, s.Expired())
	assert.True(t, s.Dead())
	assert.False(t, s.Released())
	assert.True(t, h.Status().Expired(), "settled")
	assert.True(t, ProbeTableEmpty(l), "the key went back")
}

// The Undo of an Upgrade makes the claim shared again, and a shared request queued behind it
// joins it.
func TestUpgradeUndo(t *testing.T) {
	l := newTestLocker(t, newTestTable(t), NewManualClock(roundStart))
	txn := l.Begin()
	defer txn.Rollback()
	h, err := txn.Lock(context.Background(), []byte("k"), testOptions{Shared: true})
	require.NoError(t, err)
	u, err := h.Upgrade(context.Background(), time.Minute, false)
	require.NoError(t, err)
	assert.False(t, h.Status().Shared())
	again, err := h.Upgrade(context.Background(), time.Minute, false)
	require.NoError(t, err)
	assert.Equal(t, Undo{}, again, "upgrading an exclusive claim has nothing to undo")
	got := lockAsync(context.Background(), l, []byte("k"), testOptions{Shared: true, Timeout: time.Minute})
	WaitQueued(t, l, []byte("k"), 1)
	u.Undo()
	assert.True(t, h.Status().Shared())
	res := testutil.Await(t, got, "the shared request, once the claim is shared again")
	require.NoError(t, res.err)
	require.True(t, res.h.Release())
}
