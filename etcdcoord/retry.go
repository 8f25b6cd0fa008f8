package etcdcoord

import (
	"time"

	"github.com/recordlock/recordlock"
)

// The back-off of background retries (hand-backs, withdrawals, the watch's restarts) runs on
// real time: it bounds I/O, not leases. A simulation of the protocol sets a clock of its own
// instead, so that when a retry runs is one of its seeded choices rather than the machine's.

type retryClockOption struct{ c recordlock.Clock }

func (o retryClockOption) apply(c *config) { c.retryClock = o.c }

// sleepOn is sleep on clock: true once d has passed on it, false once the coordinator closes.
func (c *Coordinator) sleepOn(clock recordlock.Clock, d time.Duration) bool {
	due := make(chan struct{})
	t := clock.AfterFunc(d, func() { close(due) })
	defer t.Stop()
	select {
	case <-due:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// sleep backs off before a retry of a background request; false once the coordinator closes.
// Retries of network requests run on real time: they bound I/O, not leases.
func (c *Coordinator) sleep(attempt int) bool {
	d := min(50*time.Millisecond<<attempt, 2*time.Second)
	if c.cfg.retryClock != nil {
		return c.sleepOn(c.cfg.retryClock, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}
