package otelrecordlock_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/linxGnu/grocksdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/otelrecordlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scope is the instrumentation scope Register names its Meter with.
const scope = "github.com/recordlock/recordlock/otelrecordlock"

// epoch is the wall reading every ManualClock in these tests starts at.
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// quiet drops the warnings the Locker logs for failing release hooks, which some tests cause.
var quiet = recordlock.WithLogger(slog.New(slog.DiscardHandler))

// newLocker returns a Locker on db, closed at the end of the test (before db, since cleanups run
// last-registered first).
func newLocker(t testing.TB, db *grocksdb.DB, opts ...recordlock.Option) *recordlock.Locker {
	t.Helper()
	l, err := recordlock.New(db, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// newProvider returns a MeterProvider with a ManualReader, shut down at the end of the test.
func newProvider(t testing.TB) (*sdkmetric.ManualReader, *sdkmetric.MeterProvider) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { assert.NoError(t, mp.Shutdown(context.Background())) })
	return reader, mp
}

// register registers l on mp; the registration ends with the test if it has not ended before.
func register(t testing.TB, l *recordlock.Locker, mp metric.MeterProvider, opts ...otelrecordlock.Option) metric.Registration {
	t.Helper()
	reg, err := otelrecordlock.Register(l, mp, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, reg.Unregister()) })
	return reg
}

// series is one instrument of the package's scope as a collection reported it.
type series struct {
	unit      string
	monotonic bool
	values    map[string]float64 // by pointOf: the db attribute, and recordlock.mode if any
}

// collect runs one collection and returns the instruments of the package's scope that carry data
// points, by name.
func collect(t testing.TB, r *sdkmetric.ManualReader) map[string]series {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := map[string]series{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != scope {
			continue
		}
		for _, m := range sm.Metrics {
			s := series{unit: m.Unit, values: map[string]float64{}}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				assert.Equal(t, metricdata.CumulativeTemporality, d.Temporality, m.Name)
				s.monotonic = d.IsMonotonic
				for _, p := range d.DataPoints {
					s.values[pointOf(t, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Sum[float64]:
				assert.Equal(t, metricdata.CumulativeTemporality, d.Temporality, m.Name)
				s.monotonic = d.IsMonotonic
				for _, p := range d.DataPoints {
					s.values[pointOf(t, p.Attributes)] = p.Value
				}
			default:
				t.Fatalf("%s: aggregation %T, want a Sum", m.Name, m.Data)
			}
			if len(s.values) > 0 {
				out[m.Name] = s
			}
		}
	}
	return out
}

// pointOf names a data point by its attributes: its db attribute, followed by "/" and its
// recordlock.mode attribute when it has one (as "orders/shared"). It checks that it has no
// other attributes.
func pointOf(t testing.TB, attrs attribute.Set) string {
	t.Helper()
	db, ok := attrs.Value("db")
	require.True(t, ok, "data point without a db attribute")
	mode, withMode := attrs.Value("recordlock.mode")
	if !withMode {
		assert.Equal(t, 1, attrs.Len(), "attributes of a data point: %v", attrs.ToSlice())
		return db.AsString()
	}
	assert.Equal(t, 2, attrs.Len(), "attributes of a data point: %v", attrs.ToSlice())
	return db.AsString() + "/" + mode.AsString()
}

// want is what each instrument must report for s, and its unit and whether it is monotonic.
func want(s recordlock.Stats) map[string]series {
	one := func(unit string, monotonic bool, v float64) series {
		return series{unit: unit, monotonic: monotonic, values: map[string]float64{"": v}}
	}
	return map[string]series{
		"recordlock.locks.held":         one("{lock}", false, float64(s.Held)),
		"recordlock.lock.waiters":       one("{request}", false, float64(s.Waiting)),
		"recordlock.lock.acquisitions":  one("{lock}", true, float64(s.Acquired)),
		"recordlock.lock.contended":     one("{lock}", true, float64(s.Contended)),
		"recordlock.lock.wait.duration": one("s", true, s.WaitTime.Seconds()),
		"recordlock.lock.timeouts":      one("{request}", true, float64(s.Timeouts)),
		"recordlock.lock.cancellations": one("{request}", true, float64(s.Canceled)),
		"recordlock.lock.deadlocks":     one("{request}", true, float64(s.Deadlocks)),
		"recordlock.lease.lapses":       one("{lease}", true, float64(s.Lapsed)),
		"recordlock.lease.revocations":  one("{lease}", true, float64(s.Revoked)),
		"recordlock.fence.refusals":     one("{call}", true, float64(s.Fenced)),
		"recordlock.hook.failures":      one("{call}", true, float64(s.HookFailures)),
	}
}

// assertMatches checks that a collection reports exactly the figures of s under db.
func assertMatches(t *testing.T, got map[string]series, s recordlock.Stats, db string) {
	t.Helper()
	w := want(s)
	assert.Len(t, got, len(w), "instruments reported")
	for name, ws := range w {
		gs, ok := got[name]
		if !assert.True(t, ok, "%s not reported", name) {
			continue
		}
		assert.Equal(t, ws.unit, gs.unit, "%s unit", name)
		assert.Equal(t, ws.monotonic, gs.monotonic, "%s monotonic", name)
		assert.Equal(t, map[string]float64{db: ws.values[""]}, gs.values, "%s", name)
	}
}

// waitForWaiters blocks until Stats shows n Lock calls queued with their timers armed, so that
// advancing the ManualClock then acts on them.
func waitForWaiters(t testing.TB, l *recordlock.Locker, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return l.Stats().Waiting == n },
		10*time.Second, 200*time.Microsecond, "waiting for %d queued Lock calls", n)
}

// lockAsync starts fn in a goroutine and returns where its error arrives.
func lockAsync(fn func() error) <-chan error {
	c := make(chan error, 1)
	go func() { c <- fn() }()
	return c
}

// result waits for an error sent by lockAsync; a call that never returns fails the test.
func result(t testing.TB, c <-chan error) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Lock did not return")
		return nil
	}
}
