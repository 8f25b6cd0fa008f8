package locktable

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A claim lets go of its release hook as the hook is queued to run (deferHook): a released handle
// the API keeps (a Txn's lock, say) does not keep the round's release, nor what it holds, alive.
func TestClaimLetsGoOfItsReleaseHookOnceQueued(t *testing.T) {
	clk := NewManualClock(time.Unix(1e9, 0))
	l := newTestLocker(t, newTestTable(t), clk)
	h, err := l.TryLock([]byte("k"), testOptions{Lease: time.Minute})
	require.NoError(t, err)
	kept := new([64]byte) // what the round's release holds
	gone := weak.Make(kept)
	var fired atomic.Int32
	require.True(t, h.JoinRound(Round{TsR: 1_000_000, Token: 1, MintedMono: clk.Mono(), Lease: time.Minute,
		Hook: hookHolding(kept, &fired)}))
	kept = nil

	require.True(t, h.Release())
	require.Equal(t, int32(1), fired.Load(), "the release hook fired")
	runtime.GC()
	runtime.GC()
	assert.Nil(t, gone.Value(), "a released claim keeps its release hook alive")
	runtime.KeepAlive(h)
	assert.True(t, ProbeTableEmpty(l))
}

// hookHolding returns a release hook that holds p and counts its calls in fired.
func hookHolding(p *[64]byte, fired *atomic.Int32) func() error {
	return func() error { p[0]++; fired.Add(1); return nil }
}
