package recordlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// TestOptionsCacheResolvesEachOptionsAlike locks with more distinct Options than a Locker caches
// resolved, valid and invalid, several times each: every lock gets its own lease and hold, and
// every invalid one is rejected every time.
func TestOptionsCacheResolvesEachOptionsAlike(t *testing.T) {
	clk, l := manual(t, openDB(t))
	valid := []recordlock.Options{
		{},
		{Lease: time.Second},
		{Lease: 2 * time.Second, Hold: true},
		{Lease: 3 * time.Second, Scope: recordlock.ScopeNode},
		{Lease: 4 * time.Second, Timeout: time.Second},
		{Lease: 5 * time.Second, Hold: true, Scope: recordlock.ScopeNode},
		{Timeout: time.Minute},
	}
	invalid := []recordlock.Options{
		{Lease: time.Millisecond},
		{Timeout: -time.Second},
		{Scope: recordlock.Scope(9)},
	}
	for round := range 3 {
		for i, o := range valid {
			h, err := l.TryLock(fmt.Appendf(nil, "k%d", i), o)
			require.NoError(t, err, "round %d, options %+v", round, o)
			want := o.Lease
			if want == 0 {
				want = recordlock.DefaultLease
			}
			assert.Equal(t, clk.Now().Add(want).UnixNano(), h.ExpiresAt().UnixNano(), "round %d, options %+v", round, o)
			assert.Equal(t, o.Hold, h.Hold(), "round %d, options %+v", round, o)
			require.True(t, h.Release())
		}
		for _, o := range invalid {
			_, err := l.TryLock([]byte("k"), o)
			require.ErrorIs(t, err, recordlock.ErrInvalidOptions, "round %d, options %+v", round, o)
		}
		_, err := l.TryLock(nil, valid[0])
		require.ErrorIs(t, err, recordlock.ErrInvalidKey, "a cached Options does not skip the key check")
	}
	assert.True(t, recordlock.ProbeTableEmpty(l))
}
