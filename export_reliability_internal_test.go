package recordlock

// White-box probes for the reliability tests in package recordlock_test, beside TableEmpty and
// QueuedWaiters: they read the key table and the ManualClock without changing them, so a test can
// assert that nothing was left behind.

// ProbeDeadlines counts the lease deadlines and wait timeouts scheduled in l's table, over every
// clock.
func ProbeDeadlines(l *Locker) int {
	n := 0
	for i := range l.tab.shards {
		sh := &l.tab.shards[i]
		sh.mu.Lock()
		sh.schedulers(func(s *scheduler) { n += len(s.heap) })
		sh.mu.Unlock()
	}
	return n
}

// ProbeSameShard reports whether two keys share a shard (and so a mutex and a timer) in l's table.
func ProbeSameShard(l *Locker, a, b []byte) bool {
	return l.tab.shard(l.tab.hash(0, a)) == l.tab.shard(l.tab.hash(0, b))
}

// ProbeTimers counts the timers of c that are armed and have not run.
func ProbeTimers(c *ManualClock) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}
