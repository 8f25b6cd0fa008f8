package etcdcoord

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/recordlock/recordlock"
)

// Defaults of the options.
const (
	// DefaultPrefix is where delegation and recall keys live in etcd.
	DefaultPrefix = "/recordlock/"
	// DefaultTTL is the TTL of the node's etcd lease. A dead node stops blocking others within
	// about this long; a lock's Lease may be at most the TTL less the skew margin.
	DefaultTTL = 60 * time.Second
	// DefaultSkew is how much longer etcd keeps the lease than this node trusts it, to absorb the
	// difference between this node's clock and the etcd leader's.
	DefaultSkew = time.Second
	// DefaultLinger is how long a delegation that no admission uses is kept for a repeat lock
	// before it is handed back.
	DefaultLinger = 30 * time.Second
	// DefaultRequestTimeout bounds the requests made outside any caller's wait: handing a
	// delegation back, withdrawing a recall, and revoking the lease in Close.
	DefaultRequestTimeout = 5 * time.Second
	// RetainedPerKey is how many released admissions whose lease has not ended a delegation
	// keeps for revocation; when one more would be kept, the oldest is revoked at once, in the
	// background, and a hand-back of the key waits for that revocation.
	RetainedPerKey = 16
)

// Option configures New.
type Option interface{ apply(*config) }

type config struct {
	prefix   string
	clock    recordlock.Clock
	stamp    func() recordlock.Timestamp
	ttl      time.Duration
	skew     time.Duration
	linger   time.Duration
	reqLimit time.Duration
	// retryClock, when set, times the back-off of background retries instead of real time, so
	// that a simulation decides when they run (retry.go); tests set it
	retryClock recordlock.Clock
	log        *slog.Logger
	watchLag   func() // runs before the watch applies each batch of events; tests set it
	// handBackLag runs in a Release that let a recalled delegation's hand-back go on, after it
	// let go of the coordinator's mutex; tests set it
	handBackLag func()
	// recallWaitLag runs when an Acquire starts to wait for this node's recalled delegation of
	// its key to end; tests set it
	recallWaitLag func()
	// changeLag runs when an Acquire's wait for a change of its record's keys in etcd ends,
	// before it looks again; tests set it
	changeLag func()
}

type prefixOption string

func (o prefixOption) apply(c *config) { c.prefix = string(o) }

// WithPrefix puts the coordinator's keys under prefix instead of DefaultPrefix. Every node that
// locks the same database must use the same prefix.
func WithPrefix(prefix string) Option { return prefixOption(prefix) }

type clockOption struct{ c recordlock.Clock }

func (o clockOption) apply(c *config) { c.clock = o.c }

// WithClock sets the clock MintedMono and admission deadlines are read from. It must be the
// clock of the Locker the coordinator serves (the default, recordlock.SystemClock, is the
// Locker's default too): a round's deadline is measured on the Locker's clock from MintedMono.
func WithClock(c recordlock.Clock) Option { return clockOption{c} }

type stampOption func() recordlock.Timestamp

func (o stampOption) apply(c *config) { c.stamp = o }

// WithTimestamp sets where a round's TsR comes from; pass the Locker's Timestamp method so that
// AcquiredAt stays in the database's strictly increasing order. The default mints from the
// clock's Now, strictly increasing per coordinator.
func WithTimestamp(f func() recordlock.Timestamp) Option { return stampOption(f) }

type ttlOption time.Duration

func (o ttlOption) apply(c *config) { c.ttl = time.Duration(o) }

// WithTTL sets the TTL of the node's etcd lease (rounded up to whole seconds); see DefaultTTL.
func WithTTL(d time.Duration) Option { return ttlOption(d) }

type skewOption time.Duration

func (o skewOption) apply(c *config) { c.skew = time.Duration(o) }

// WithSkew sets the skew margin; see DefaultSkew.
func WithSkew(d time.Duration) Option { return skewOption(d) }

type lingerOption time.Duration

func (o lingerOption) apply(c *config) { c.linger = time.Duration(o) }

// WithLinger sets how long an idle delegation is kept; see DefaultLinger. Idle delegations are
// handed back in batches by a later Acquire of the node, and all at once when the node's lease
// lapses or the coordinator closes.
func WithLinger(d time.Duration) Option { return lingerOption(d) }

type requestTimeoutOption time.Duration

func (o requestTimeoutOption) apply(c *config) { c.reqLimit = time.Duration(o) }

// WithRequestTimeout bounds the requests made outside any caller's wait; see
// DefaultRequestTimeout.
func WithRequestTimeout(d time.Duration) Option { return requestTimeoutOption(d) }

type loggerOption struct{ l *slog.Logger }

func (o loggerOption) apply(c *config) { c.log = o.l }

// WithLogger sets where failed hand-backs, withdrawals, watch restarts and lost delegations are
// reported. The default, and what nil means, is slog.Default().
func WithLogger(l *slog.Logger) Option { return loggerOption{l} }

type watchLagOption func()

func (o watchLagOption) apply(c *config) { c.watchLag = o }

type handBackLagOption func()

func (o handBackLagOption) apply(c *config) { c.handBackLag = o }

type recallWaitLagOption func()

func (o recallWaitLagOption) apply(c *config) { c.recallWaitLag = o }

type changeLagOption func()

func (o changeLagOption) apply(c *config) { c.changeLag = o }

// clockStamps mints timestamps from a clock's wall reading, strictly increasing.
type clockStamps struct {
	clock recordlock.Clock
	last  atomic.Int64
}

func (s *clockStamps) mint() recordlock.Timestamp {
	now := s.clock.Now().UnixNano()
	for {
		last := s.last.Load()
		next := max(now, last+1)
		if s.last.CompareAndSwap(last, next) {
			return recordlock.Timestamp(next)
		}
	}
}
