// Package otelrecordlock exports the figures of a recordlock.Locker (Locker.Stats) as
// OpenTelemetry metrics. It is a module of its own so that the core needs no OpenTelemetry.
//
// Register creates one observable instrument per Stats field on a Meter named
// "github.com/recordlock/recordlock/otelrecordlock" and one callback that calls Stats once per
// collection and observes every instrument from that one reading, so the figures of a collection
// are consistent with each other as far as Stats is:
//
//	name                           instrument                    unit       Stats field
//	recordlock.locks.held          Int64ObservableUpDownCounter  {lock}     Held
//	recordlock.lock.waiters        Int64ObservableUpDownCounter  {request}  Waiting
//	recordlock.lock.acquisitions   Int64ObservableCounter        {lock}     Acquired
//	recordlock.lock.contended      Int64ObservableCounter        {lock}     Contended
//	recordlock.lock.wait.duration  Float64ObservableCounter      s          WaitTime
//	recordlock.lock.timeouts       Int64ObservableCounter        {request}  Timeouts
//	recordlock.lock.cancellations  Int64ObservableCounter        {request}  Canceled
//	recordlock.lock.deadlocks      Int64ObservableCounter        {request}  Deadlocks
//	recordlock.lease.lapses        Int64ObservableCounter        {lease}    Lapsed
//	recordlock.lease.revocations   Int64ObservableCounter        {lease}    Revoked
//	recordlock.fence.refusals      Int64ObservableCounter        {call}     Fenced
//	recordlock.hook.failures       Int64ObservableCounter        {call}     HookFailures
//
// The two UpDownCounters are readings of now: locks held count holders (a key that three readers
// share counts three), and requests waiting include upgrades waiting for their key. The counters
// are cumulative totals since the database's key-lock table was created (they start again from
// zero when the last Locker of the database closes and a new one opens). Every observation
// carries one attribute, db, naming the database (see WithDB).
//
// # Lock modes
//
// Stats counts holders and waiting requests without their mode (shared or exclusive), and
// nothing else here reports a single lock, so by default no observation carries a mode. With
// WithModes, the two UpDownCounters are observed once per mode instead, with a second attribute,
// recordlock.mode, "shared" or "exclusive" (an upgrade waiting for its key counts as exclusive):
// recordlock.locks.held counted from Locker.Locks, recordlock.lock.waiters from Locker.Waits.
// Those two visit the whole table, shard by shard under its mutex, and copy every holder and
// waiting request, so a collection then costs time and memory in proportion to the locks held
// (where Stats costs a few words per shard). Their counts are a reading of their own, which may
// differ from the same collection's counters by the locks that came and went meanwhile. Both
// modes are observed at every collection, 0 when none is held or waiting.
//
// Stats are per database and shared by every Locker of it, so register one Locker per database:
// two registrations of one database report the same figures twice.
//
//	reg, err := otelrecordlock.Register(locker, meterProvider, otelrecordlock.WithDB("orders"))
//	if err != nil {
//		return err
//	}
//	defer reg.Unregister() // before locker.Close
//
// # Prometheus
//
// Through the OpenTelemetry Prometheus exporter the names become recordlock_locks_held,
// recordlock_lock_acquisitions_total, recordlock_lock_wait_duration_seconds_total and so on.
// The program examples/prometheus of this module serves them at /metrics (-addr, default
// localhost:9464) while workers lock keys, then after -duration (default 3 s) prints what it
// scraped from itself and exits:
//
//	cd otelrecordlock && go run ./examples/prometheus
package otelrecordlock

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/recordlock/recordlock"
)

// scopeName is the instrumentation scope of the Meter, by convention the package's import path.
const scopeName = "github.com/recordlock/recordlock/otelrecordlock"

// defaultDB is the db attribute when WithDB is not given. A Locker does not tell its database's
// path through its API, so the name cannot be worked out.
const defaultDB = "default"

// Option configures Register.
type Option interface{ apply(*config) }

type config struct {
	db    string
	modes bool
}

type dbOption string

func (o dbOption) apply(c *config) { c.db = string(o) }

type modesOption struct{}

func (modesOption) apply(c *config) { c.modes = true }

// WithModes splits recordlock.locks.held and recordlock.lock.waiters by lock mode, with the
// attribute recordlock.mode, at the cost of visiting every held lock at each collection (see Lock
// modes in the package documentation).
func WithModes() Option { return modesOption{} }

// modeKey is the attribute that WithModes adds; "shared" and "exclusive" are its values.
const modeKey = "recordlock.mode"

// WithDB sets the value of the db attribute of every observation. Without it the value is
// "default", since a Locker does not tell the path of its database; pass a name of your own (for
// example the path given to grocksdb.OpenDb) when more than one database is registered, so their
// series stay apart.
func WithDB(name string) Option { return dbOption(name) }

// int64Metric is one instrument fed from an integer Stats field.
type int64Metric struct {
	name, unit, desc string
	upDown           bool // a reading of now, which can go down, rather than a running total
	value            func(recordlock.Stats) int64
}

// int64Metrics are the integer instruments, in the order of the Stats fields; WithModes splits
// the first two (heldMetric, waitersMetric) by mode.
var int64Metrics = []int64Metric{
	{"recordlock.locks.held", "{lock}", "Locks held now, one per holder: a key three readers share counts three.", true,
		func(s recordlock.Stats) int64 { return int64(s.Held) }},
	{"recordlock.lock.waiters", "{request}", "Lock calls and upgrades queued now for a busy key.", true,
		func(s recordlock.Stats) int64 { return int64(s.Waiting) }},
	{"recordlock.lock.acquisitions", "{lock}", "Keys granted.", false,
		func(s recordlock.Stats) int64 { return int64(s.Acquired) }},
	{"recordlock.lock.contended", "{lock}", "Grants that waited for a busy key.", false,
		func(s recordlock.Stats) int64 { return int64(s.Contended) }},
	{"recordlock.lock.timeouts", "{request}", "Lock calls that failed with ErrTimeout after waiting.", false,
		func(s recordlock.Stats) int64 { return int64(s.Timeouts) }},
	{"recordlock.lock.cancellations", "{request}", "Lock calls whose context ended the wait.", false,
		func(s recordlock.Stats) int64 { return int64(s.Canceled) }},
	{"recordlock.lock.deadlocks", "{request}", "Lock requests that failed with ErrDeadlock.", false,
		func(s recordlock.Stats) int64 { return int64(s.Deadlocks) }},
	{"recordlock.lease.lapses", "{lease}", "Leases that ran out while their key was still held.", false,
		func(s recordlock.Stats) int64 { return int64(s.Lapsed) }},
	{"recordlock.lease.revocations", "{lease}", "Leases ended by RevokeLease.", false,
		func(s recordlock.Stats) int64 { return int64(s.Revoked) }},
	{"recordlock.fence.refusals", "{call}", "Fence or Commit calls refused with ErrLeaseExpired.", false,
		func(s recordlock.Stats) int64 { return int64(s.Fenced) }},
	{"recordlock.hook.failures", "{call}", "Release hooks that returned an error or panicked.", false,
		func(s recordlock.Stats) int64 { return int64(s.HookFailures) }},
}

// The indexes in int64Metrics of the instruments WithModes splits by mode.
const (
	heldMetric    = 0
	waitersMetric = 1
)

// Register creates the instruments listed in the package documentation on a Meter of mp and
// registers one callback that observes them from l.Stats(), called once per collection. The
// returned Registration's Unregister stops the callback; call it before l.Close, after which
// the callback would go on reporting the figures as Close left them.
//
// It fails when l or mp is nil, or when mp refuses an instrument or the callback; nothing stays
// registered then.
func Register(l *recordlock.Locker, mp metric.MeterProvider, opts ...Option) (metric.Registration, error) {
	if l == nil {
		return nil, errors.New("otelrecordlock: Register with a nil Locker")
	}
	if mp == nil {
		return nil, errors.New("otelrecordlock: Register with a nil MeterProvider")
	}
	cfg := config{db: defaultDB}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	m := mp.Meter(scopeName)

	ints := make([]metric.Int64Observable, len(int64Metrics))
	observables := make([]metric.Observable, 0, len(int64Metrics)+1)
	for i, im := range int64Metrics {
		var err error
		if im.upDown {
			ints[i], err = m.Int64ObservableUpDownCounter(im.name, metric.WithUnit(im.unit), metric.WithDescription(im.desc))
		} else {
			ints[i], err = m.Int64ObservableCounter(im.name, metric.WithUnit(im.unit), metric.WithDescription(im.desc))
		}
		if err != nil {
			return nil, fmt.Errorf("otelrecordlock: instrument %s: %w", im.name, err)
		}
		observables = append(observables, ints[i])
	}
	wait, err := m.Float64ObservableCounter("recordlock.lock.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Total time the grants that waited for a busy key spent waiting."))
	if err != nil {
		return nil, fmt.Errorf("otelrecordlock: instrument recordlock.lock.wait.duration: %w", err)
	}
	observables = append(observables, wait)

	// The attribute sets of every observation, built once rather than per collection.
	db := attribute.String("db", cfg.db)
	attrs := metric.WithAttributeSet(attribute.NewSet(db))
	byMode := [2]metric.ObserveOption{ // indexed by modeIndex
		metric.WithAttributeSet(attribute.NewSet(db, attribute.String(modeKey, "exclusive"))),
		metric.WithAttributeSet(attribute.NewSet(db, attribute.String(modeKey, "shared"))),
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := l.Stats()
		for i, im := range int64Metrics {
			if cfg.modes && (i == heldMetric || i == waitersMetric) {
				continue // observed by mode below
			}
			o.ObserveInt64(ints[i], im.value(s), attrs)
		}
		o.ObserveFloat64(wait, s.WaitTime.Seconds(), attrs)
		if cfg.modes {
			held, waiting := countModes(l)
			for m := range byMode {
				o.ObserveInt64(ints[heldMetric], held[m], byMode[m])
				o.ObserveInt64(ints[waitersMetric], waiting[m], byMode[m])
			}
		}
		return nil
	}, observables...)
	if err != nil {
		return nil, fmt.Errorf("otelrecordlock: register callback: %w", err)
	}
	return reg, nil
}

// modeIndex is where a mode's count goes in countModes' arrays: 1 for shared, 0 for exclusive.
func modeIndex(shared bool) int {
	if shared {
		return 1
	}
	return 0
}

// countModes counts the holders and the waiting requests of l's database by mode, indexed by
// modeIndex. A waiting upgrade asks for an exclusive lock, so it counts as exclusive.
func countModes(l *recordlock.Locker) (held, waiting [2]int64) {
	for info := range l.Locks() {
		held[modeIndex(info.Shared)]++
	}
	for w := range l.Waits() {
		waiting[modeIndex(w.Shared && !w.Upgrade)]++
	}
	return held, waiting
}
