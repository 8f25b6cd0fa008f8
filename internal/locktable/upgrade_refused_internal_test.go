package locktable

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An Upgrade is refused, leaving the share as it was, once its tenant is closed (ErrClosed: the
// table grants no key to a closed tenant, §2.5) or its share has ended (ErrReleased,
// ErrLeaseExpired), though the share is the key's only one.
func TestUpgradeOfAClosedTenantOrAnEndedShareIsRefused(t *testing.T) {
	ctx := context.Background()
	t.Run("closed", func(t *testing.T) {
		l := newTestLocker(t, newTestTable(t), NewManualClock(time.Unix(1, 0)))
		h, err := l.TryLock([]byte("k"), testOptions{Shared: true})
		require.NoError(t, err)
		l.ten.MarkClosed() // Shutdown, which releases h, has not run yet
		_, err = h.Upgrade(ctx, time.Second, false)
		require.ErrorIs(t, err, ErrClosed, "a closed tenant's share was upgraded")
		assert.True(t, h.Status().Shared())
	})
	// A table of its own, closed at the end and by no cleanup: an upgrade of an ended share that
	// went on would fail under the shard mutex, and a Close would wait for it.
	l := openTestLocker(New("test", &Stamps{}), NewManualClock(time.Unix(1, 0)), slog.New(slog.DiscardHandler))
	released, err := l.TryLock([]byte("r"), testOptions{Shared: true})
	require.NoError(t, err)
	require.True(t, released.Release())
	_, err = released.Upgrade(ctx, time.Second, false)
	assert.ErrorIs(t, err, ErrReleased, "a released share was upgraded")
	revoked, err := l.TryLock([]byte("v"), testOptions{Shared: true})
	require.NoError(t, err)
	revoked.Revoke()
	_, err = revoked.Upgrade(ctx, time.Second, false)
	assert.ErrorIs(t, err, ErrLeaseExpired, "a revoked share was upgraded")
	require.NoError(t, l.Close())
	assert.True(t, ProbeTableEmpty(l))
}
