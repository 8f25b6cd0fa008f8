package recordlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// What a cluster lock asks of the coordinator: its column family by name ("default" for the
// plain calls, the family's name for the CF ones, a family created after the Locker opened
// included), its key, its mode as Options.Shared says, its lease as resolved, and a Revoke that
// ends the handle's lease.
func TestClusterRequestNamesTheRecord(t *testing.T) {
	db, cfs := openCFDB(t, "accounts")
	clk, l := manual(t, db)
	c := newTestCoord(clk, l.Timestamp)
	l.SetCoordinator(c)
	ctx := context.Background()
	cfOpts := grocksdb.NewDefaultOptions()
	defer cfOpts.Destroy()
	late, err := db.CreateColumnFamily(cfOpts, "late")
	require.NoError(t, err)
	defer late.Destroy()
	accounts := cfs[0]

	for _, tc := range []struct {
		name   string
		lock   func() (*recordlock.Handle, error)
		cf     string
		key    string
		shared bool
		lease  time.Duration
	}{
		{"Lock", func() (*recordlock.Handle, error) {
			return l.Lock(ctx, []byte("k1"), recordlock.Options{})
		}, "default", "k1", false, recordlock.DefaultLease},
		{"Lock shared", func() (*recordlock.Handle, error) {
			return l.Lock(ctx, []byte("k2"), recordlock.Options{Shared: true, Lease: 3 * time.Second})
		}, "default", "k2", true, 3 * time.Second},
		{"TryLock", func() (*recordlock.Handle, error) {
			return l.TryLock([]byte("k3"), recordlock.Options{Lease: time.Second})
		}, "default", "k3", false, time.Second},
		{"LockCF", func() (*recordlock.Handle, error) {
			return l.LockCF(ctx, accounts, []byte("k1"), recordlock.Options{Lease: 2 * time.Second})
		}, "accounts", "k1", false, 2 * time.Second},
		{"TryLockCF shared", func() (*recordlock.Handle, error) {
			return l.TryLockCF(accounts, []byte("k4"), recordlock.Options{Shared: true})
		}, "accounts", "k4", true, recordlock.DefaultLease},
		{"LockCF of a family created since", func() (*recordlock.Handle, error) {
			return l.LockCF(ctx, late, []byte("k1"), recordlock.Options{Shared: true})
		}, "late", "k1", true, recordlock.DefaultLease},
		{"Txn.LockCF", func() (*recordlock.Handle, error) {
			return txnNamed(t, l, "t").LockCF(ctx, accounts, []byte("k5"), recordlock.Options{Shared: true})
		}, "accounts", "k5", true, recordlock.DefaultLease},
		{"Txn.LockAllCF", func() (*recordlock.Handle, error) {
			hs, err := txnNamed(t, l, "t").LockAllCF(ctx, accounts, recordlock.Options{Lease: 4 * time.Second}, []byte("k6"))
			if err != nil {
				return nil, err
			}
			return hs[0], nil
		}, "accounts", "k6", false, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := tc.lock()
			require.NoError(t, err)
			require.Equal(t, recordlock.ScopeCluster, h.Scope())
			req := c.lastRequest(t)
			requireRequest(t, req, tc.cf, tc.key, tc.shared, tc.lease)
			assert.Equal(t, []liveRound{{shared: tc.shared, token: h.Token()}}, c.liveOf(tc.cf, tc.key))
			req.Revoke()
			assert.True(t, h.IsLeaseExpired(), "Revoke ends the handle's lease")
			assert.Empty(t, c.liveOf(tc.cf, tc.key), "and gives its round back")
		})
	}
}

// An upgrade's exclusive round is asked for the record the share holds: in a column family, by
// its name. Its Revoke ends the upgraded handle's lease.
func TestClusterUpgradeRequestNamesTheColumnFamily(t *testing.T) {
	db, cfs := openCFDB(t, "accounts")
	clk, l := manual(t, db)
	c := newTestCoord(clk, l.Timestamp)
	l.SetCoordinator(c)
	ctx := context.Background()
	txn := txnNamed(t, l, "t")
	h, err := txn.LockCF(ctx, cfs[0], []byte("k"), recordlock.Options{Shared: true, Lease: 10 * time.Second})
	require.NoError(t, err)
	clk.Advance(4 * time.Second)
	_, err = txn.LockCF(ctx, cfs[0], []byte("k"), recordlock.Options{})
	require.NoError(t, err)
	require.False(t, h.Shared())
	req := c.lastRequest(t)
	requireRequest(t, req, "accounts", "k", false, 6*time.Second)
	assert.Equal(t, []liveRound{{token: h.Token()}}, c.liveOf("accounts", "k"))
	assert.Empty(t, c.liveOf("default", "k"))
	req.Revoke()
	assert.True(t, h.IsLeaseExpired(), "recalling the exclusive admission ends the handle's lease")
	assert.Empty(t, c.liveOf("accounts", "k"), "and gives the exclusive round back")
}
