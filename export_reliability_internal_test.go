package recordlock

// White-box probes for the reliability tests in package recordlock_test: they read the key table
// and the ManualClock without changing them, so a test can assert that nothing was left behind.

// ProbeTableEmpty reports whether no key of l's database is held or waited on.
func ProbeTableEmpty(l *Locker) bool { return l.tab.empty() }

// ProbeWaiters counts the Lock calls queued for key in l's table.
func ProbeWaiters(l *Locker, key []byte) int {
	h := l.tab.hash(key)
	sh := l.tab.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.lookup(h, key)
	if e == nil {
		return 0
	}
	n := 0
	for w := e.head; w != nil; w = w.next {
		n++
	}
	return n
}

// ProbeDeadlines counts the lease deadlines and wait timeouts scheduled in l's table, over every
// clock.
func ProbeDeadlines(l *Locker) int {
	n := 0
	for i := range l.tab.shards {
		sh := &l.tab.shards[i]
		sh.mu.Lock()
		for _, s := range sh.scheds {
			if s != nil {
				n += len(s.heap)
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// ProbeSameShard reports whether two keys share a shard (and so a mutex and a timer) in l's table.
func ProbeSameShard(l *Locker, a, b []byte) bool {
	return l.tab.shard(l.tab.hash(a)) == l.tab.shard(l.tab.hash(b))
}

// ProbeTimers counts the timers of c that are armed and have not run.
func ProbeTimers(c *ManualClock) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}
