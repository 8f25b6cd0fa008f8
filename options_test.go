package recordlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/recordlock/recordlock/internal/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

func TestInvalidOptionsLockNothing(t *testing.T) {
	cases := []struct {
		name  string
		opts  recordlock.Options
		field string
		value any
		msg   string
	}{
		{"negative lease", recordlock.Options{Lease: -time.Second}, "Lease", -time.Second,
			"recordlock: lock option Lease must not be negative, got -1s"},
		{"lease below minimum", recordlock.Options{Lease: 5 * time.Millisecond}, "Lease", 5 * time.Millisecond,
			"recordlock: lock option Lease must be at least 100ms, got 5ms"},
		{"lease a nanosecond below minimum", recordlock.Options{Lease: recordlock.MinLease - 1}, "Lease", recordlock.MinLease - 1,
			"recordlock: lock option Lease must be at least 100ms, got 99.999999ms"},
		{"lease above maximum", recordlock.Options{Lease: recordlock.MaxLease + time.Second}, "Lease", recordlock.MaxLease + time.Second,
			"recordlock: lock option Lease must be at most 5m0s, got 5m1s"},
		{"negative timeout", recordlock.Options{Timeout: -time.Millisecond}, "Timeout", -time.Millisecond,
			"recordlock: lock option Timeout must not be negative, got -1ms"},
		{"timeout below minimum", recordlock.Options{Timeout: 500 * time.Microsecond}, "Timeout", 500 * time.Microsecond,
			"recordlock: lock option Timeout must be at least 1ms, got 500µs"},
		{"timeout above maximum", recordlock.Options{Timeout: time.Hour}, "Timeout", time.Hour,
			"recordlock: lock option Timeout must be at most 5m0s, got 1h0m0s"},
		{"unknown scope", recordlock.Options{Scope: recordlock.Scope(7)}, "Scope", recordlock.Scope(7),
			"recordlock: lock option Scope must be ScopeDefault, ScopeCluster or ScopeNode, got Scope(7)"},
		{"bad lease with valid rest", recordlock.Options{Lease: time.Nanosecond, Timeout: time.Second, Scope: recordlock.ScopeNode, Hold: true},
			"Lease", time.Nanosecond, "recordlock: lock option Lease must be at least 100ms, got 1ns"},
	}
	_, l := manual(t, openDB(t))
	key := []byte("k")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			check := func(t *testing.T, err error) {
				t.Helper()
				require.ErrorIs(t, err, recordlock.ErrInvalidOptions, "an invalid option is an *OptionError, before anything is locked")
				var oe *recordlock.OptionError
				require.ErrorAs(t, err, &oe)
				assert.Equal(t, tc.field, oe.Field, "the OptionError names the option that broke its bounds")
				assert.Equal(t, tc.value, oe.Value, "the OptionError carries the value refused")
				assert.NotEmpty(t, oe.Reason)
				assert.EqualError(t, err, tc.msg, "the message says which bound the option broke")
			}
			_, err := tc.opts.Resolve()
			check(t, err)
			h, err := l.Lock(context.Background(), key, tc.opts)
			check(t, err)
			assert.Nil(t, h)
			h, err = l.TryLock(key, tc.opts)
			check(t, err)
			assert.Nil(t, h)
			assert.True(t, recordlock.ProbeTableEmpty(l), "an invalid option locked something")
		})
	}
}

func TestOptionBoundsAreValid(t *testing.T) {
	clk, l := manual(t, openDB(t))
	for _, opts := range []recordlock.Options{
		{Lease: recordlock.MinLease, Timeout: recordlock.MinTimeout},
		{Lease: recordlock.MaxLease, Timeout: recordlock.MaxTimeout},
	} {
		h, err := l.TryLock([]byte("k"), opts)
		require.NoError(t, err)
		clk.Advance(opts.Lease - time.Nanosecond)
		assert.False(t, h.IsExpired())
		clk.Advance(time.Nanosecond)
		assert.True(t, h.IsExpired(), "the lease is the one asked for")
	}
}

func TestResolveDefaults(t *testing.T) {
	cases := []struct {
		opts recordlock.Options
		want recordlock.Resolved
	}{
		{recordlock.Options{}, recordlock.Resolved{Lease: recordlock.DefaultLease, Timeout: recordlock.DefaultTimeout,
			Scope: recordlock.ScopeCluster}},
		{recordlock.Options{Scope: recordlock.ScopeCluster}, recordlock.Resolved{Lease: recordlock.DefaultLease,
			Timeout: recordlock.DefaultTimeout, Scope: recordlock.ScopeCluster, ScopeRequested: true}},
		{recordlock.Options{Lease: time.Second, Timeout: 2 * time.Second, Hold: true, Scope: recordlock.ScopeNode},
			recordlock.Resolved{Lease: time.Second, Timeout: 2 * time.Second, Hold: true, Scope: recordlock.ScopeNode,
				ScopeRequested: true}},
	}
	for _, tc := range cases {
		got, err := tc.opts.Resolve()
		require.NoError(t, err)
		assert.Equal(t, tc.want, got)
	}
	assert.Equal(t, 30*time.Second, recordlock.DefaultLease)
	assert.Equal(t, 100*time.Millisecond, recordlock.MinLease)
	assert.Equal(t, 5*time.Minute, recordlock.MaxLease)
	assert.Equal(t, 30*time.Second, recordlock.DefaultTimeout)
	assert.Equal(t, time.Millisecond, recordlock.MinTimeout)
	assert.Equal(t, 5*time.Minute, recordlock.MaxTimeout)
}

func TestDefaultTimeoutApplies(t *testing.T) {
	clk, l := manual(t, openDB(t))
	key := []byte("k")
	h, err := l.TryLock(key, recordlock.Options{Lease: recordlock.MaxLease})
	require.NoError(t, err)
	got := lockAsync(context.Background(), l, key, recordlock.Options{})
	waitQueued(t, l, key, 1)
	clk.Advance(recordlock.DefaultTimeout - time.Nanosecond)
	assert.Equal(t, 1, recordlock.ProbeQueuedWaiters(l, key))
	clk.Advance(time.Nanosecond)
	require.ErrorIs(t, testutil.Await(t, got, "Lock").err, recordlock.ErrTimeout)
	require.True(t, h.Release())
}

func TestScopeString(t *testing.T) {
	assert.Equal(t, "default", recordlock.ScopeDefault.String())
	assert.Equal(t, "cluster", recordlock.ScopeCluster.String())
	assert.Equal(t, "node", recordlock.ScopeNode.String())
	assert.Equal(t, "Scope(9)", recordlock.Scope(9).String())
}
