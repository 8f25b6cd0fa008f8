package etcdcoord_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// A node whose client reaches only a member cut off from the quorum stops admitting from its
// delegations soon, not when its lease runs out: its watch requires a leader, so the node
// learns that it can no longer see recalls. Once healed it locks again.
func TestIsolatedMemberStopsAdmissions(t *testing.T) {
	ec := startCluster(t)
	f := (ec.leader() + 1) % 3
	x := newNode(t, nil, "x", nodeConfig{endpoints: []string{ec.members[f].client}})
	ctx := context.Background()
	h, err := x.l.Lock(ctx, []byte("k"), cluster(time.Second, 10*time.Second))
	require.NoError(t, err)
	require.True(t, h.Release())

	ec.isolate(f)
	deadline := time.Now().Add(15 * time.Second) // the node's lease is trusted for 59 s
	admissions := 0
	for {
		h, err := x.l.TryLock([]byte("k"), cluster(time.Second, 100*time.Millisecond))
		if err != nil {
			require.ErrorIs(t, err, recordlock.ErrClusterUnavailable)
			break
		}
		admissions++
		require.True(t, h.Release())
		require.True(t, time.Now().Before(deadline), "with WithRequireLeader a member cut off from the quorum fails fast, "+
			"but the node still admitted %d times after its member lost the quorum", admissions)
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d admissions after the isolation before the node stopped", admissions)

	ec.heal()
	h, err = x.l.Lock(ctx, []byte("k"), cluster(time.Second, 30*time.Second))
	require.NoError(t, err)
	require.True(t, h.Release())
}
