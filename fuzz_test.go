package recordlock_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

// validDuration is the rule for a duration option (docs/DESIGN.md §3), written independently of
// Resolve: zero means the default, anything else must lie within the bounds.
func validDuration(v, lo, hi time.Duration) bool { return v == 0 || (v >= lo && v <= hi) }

// FuzzOptions checks option validation: nothing panics, every rejection is an *OptionError
// matching ErrInvalidOptions that names a bad field and its value, every accepted value is
// defaulted and within bounds, and TryLock and UpgradeToHold apply the same rules.
func FuzzOptions(f *testing.F) {
	f.Add(int64(0), int64(0), false, uint8(0))
	f.Add(int64(recordlock.MinLease-1), int64(recordlock.MaxTimeout+1), true, uint8(3))
	db := openDB(f)
	key := []byte("fuzz-options")
	f.Fuzz(func(t *testing.T, lease, timeout int64, hold bool, scope uint8) {
		clk, l := manual(t, db, recordlock.WithLogger(quiet))
		o := recordlock.Options{Lease: time.Duration(lease), Timeout: time.Duration(timeout), Hold: hold, Scope: recordlock.Scope(scope)}
		bad := map[string]any{}
		if !validDuration(o.Lease, recordlock.MinLease, recordlock.MaxLease) {
			bad["Lease"] = o.Lease
		}
		if !validDuration(o.Timeout, recordlock.MinTimeout, recordlock.MaxTimeout) {
			bad["Timeout"] = o.Timeout
		}
		if scope > uint8(recordlock.ScopeNode) {
			bad["Scope"] = o.Scope
		}
		wantLease := cmpOr(o.Lease, recordlock.DefaultLease)

		r, err := o.Resolve()
		if len(bad) > 0 {
			checkOptionError(t, err, bad)
			assert.Zero(t, r)
		} else {
			require.NoError(t, err)
			assert.Equal(t, wantLease, r.Lease)
			assert.Equal(t, cmpOr(o.Timeout, recordlock.DefaultTimeout), r.Timeout)
			assert.True(t, r.Lease >= recordlock.MinLease && r.Lease <= recordlock.MaxLease, "lease %v out of bounds", r.Lease)
			assert.True(t, r.Timeout >= recordlock.MinTimeout && r.Timeout <= recordlock.MaxTimeout, "timeout %v out of bounds", r.Timeout)
			assert.Equal(t, hold, r.Hold)
			assert.Equal(t, o.Scope != recordlock.ScopeDefault, r.ScopeRequested)
			if o.Scope == recordlock.ScopeNode {
				assert.Equal(t, recordlock.ScopeNode, r.Scope)
			} else {
				assert.Equal(t, recordlock.ScopeCluster, r.Scope)
			}
		}

		h, err := l.TryLock(key, o)
		switch {
		case len(bad) > 0:
			checkOptionError(t, err, bad)
			assert.Nil(t, h)
		case o.Scope == recordlock.ScopeCluster:
			require.ErrorIs(t, err, recordlock.ErrClusterUnavailable, "cluster scope without a coordinator fails closed")
		default:
			require.NoError(t, err)
			assert.Equal(t, hold, h.Hold())
			assert.Equal(t, recordlock.ScopeNode, h.Scope())
			assert.True(t, h.ExpiresAt().Equal(clk.Now().Add(wantLease)), "ExpiresAt %v", h.ExpiresAt())
			err := h.UpgradeToHold(o.Lease)
			if _, leaseBad := bad["Lease"]; leaseBad {
				checkOptionError(t, err, map[string]any{"Lease": o.Lease})
			} else {
				require.NoError(t, err)
				assert.True(t, h.Hold())
				assert.True(t, h.ExpiresAt().Equal(clk.Now().Add(wantLease)), "ExpiresAt after upgrade %v", h.ExpiresAt())
			}
			assert.True(t, h.Release())
		}
		// UpgradeToHold applies the Lease rule even to a dead handle.
		if h, err := l.TryLock(key, recordlock.Options{Scope: recordlock.ScopeNode}); assert.NoError(t, err) {
			require.True(t, h.Release())
			err := h.UpgradeToHold(o.Lease)
			if _, leaseBad := bad["Lease"]; leaseBad {
				checkOptionError(t, err, map[string]any{"Lease": o.Lease})
			} else {
				require.ErrorIs(t, err, recordlock.ErrReleased)
			}
		}
		assert.True(t, recordlock.ProbeTableEmpty(l))
	})
}

func cmpOr(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

// checkOptionError asserts err is an *OptionError matching ErrInvalidOptions for one of the bad
// fields, carrying that field's value and saying so in the words of docs/DESIGN.md §3.
func checkOptionError(t *testing.T, err error, bad map[string]any) {
	t.Helper()
	require.ErrorIs(t, err, recordlock.ErrInvalidOptions)
	var oe *recordlock.OptionError
	require.ErrorAs(t, err, &oe)
	v, ok := bad[oe.Field]
	require.True(t, ok, "rejected field %q is not one of the bad ones %v", oe.Field, bad)
	assert.Equal(t, v, oe.Value)
	msg := err.Error()
	assert.True(t, strings.HasPrefix(msg, "recordlock: lock option "+oe.Field+" must "), msg)
	assert.True(t, strings.HasSuffix(msg, fmt.Sprintf(", got %v", v)), msg)
}

// FuzzOps decodes the input into lock, try-lock (either mode), release, revoke, join-round,
// upgrade, fence, version, advance-clock, step-wall and close operations on two Lockers of one
// database sharing a ManualClock, and Txn locks (either mode, upgrades included) and Txn ends,
// applies each to the library and to the reference model, and after every operation compares
// every observable: return values, errors, IsExpired, IsLeaseExpired, Done, accessors, mode,
// hook calls, and who holds each key in which mode. At the end the table must be empty and no timer pending.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 0, 0, 8, 6, 3, 0})
	db := openDB(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		m := &fzModel{t: t, db: db, clk: recordlock.NewManualClock(epoch), wall: epoch}
		m.wo = grocksdb.NewDefaultWriteOptions()
		defer m.wo.Destroy()
		for i := range m.lockers {
			m.lockers[i] = newLocker(t, db, recordlock.WithClock(m.clk), recordlock.WithLogger(quiet))
		}
		m.probe = newLocker(t, db, recordlock.WithClock(m.clk), recordlock.WithLogger(quiet))
		// A database's timestamps keep increasing across its tables, so earlier inputs on this
		// database have minted some: start from the latest.
		m.lastTs = int64(m.probe.Timestamp())
		r := &fzReader{b: data}
		for n := 0; r.i < len(r.b) && n < fzMaxOps; n++ {
			switch op := r.next() % 14; op {
			case 0, 1, 2:
				m.lock(int(op), r.next(), r.next())
			case 3:
				m.release(r.next())
			case 4:
				m.revoke(r.next())
			case 5:
				m.join(r.next(), r.next(), r.next())
			case 6:
				m.upgrade(r.next(), r.next())
			case 7:
				m.fence(r.next(), r.next())
			case 8:
				d := pick(fzAdvances, r.next())
				m.trace = append(m.trace, fmt.Sprintf("advance %v", d))
				m.advance(d)
			case 9:
				a := r.next()
				d := pick(fzWallSteps, a>>1)
				if a&1 == 1 {
					d = -d
				}
				m.trace = append(m.trace, fmt.Sprintf("step wall %v", d))
				m.stepWall(d)
			case 10:
				m.versions(r.next(), r.next(), r.next())
			case 11:
				m.close(r.next())
			case 12:
				m.txnLock(r.next(), r.next())
			case 13:
				m.txnEnd(r.next())
			}
			m.check()
		}
		m.close(0)
		m.close(1)
		m.check()
		m.expect(recordlock.ProbeTableEmpty(m.probe), "the table is not empty once every Locker closed")
		m.expect(recordlock.ProbeDeadlines(m.probe) == 0, "%d deadlines still scheduled", recordlock.ProbeDeadlines(m.probe))
		require.NoError(t, m.probe.Close())
		m.expect(recordlock.ProbeTimers(m.clk) == 0, "%d timers pending after every Locker closed", recordlock.ProbeTimers(m.clk))
	})
}
