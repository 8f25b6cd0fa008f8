package locktable

// Probes: read-only views of the table's state for the tests of the packages that use it, so
// that a test can assert that nothing was left behind. Each reads under the shard mutexes and
// changes nothing.

// Empty reports whether no key is held or waited on.
func (t *Table) Empty() bool {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n := sh.index.n
		empty := sh.rangesEmpty()
		sh.mu.Unlock()
		if n != 0 || !empty {
			return false
		}
	}
	return true
}

// Deadlines counts the lease deadlines and wait timeouts scheduled, over every clock.
func (t *Table) Deadlines() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.schedulers(func(s *scheduler) { n += len(s.heap) })
		sh.mu.Unlock()
	}
	return n
}

// Queued counts the requests fully queued for the record (cf, key), and of them those woken to
// take it. A request counts once it is fully queued: its timers armed and, for an owner's, its
// deadlock check done (as Counts.Waiting counts it) and no check again pending or running
// (recheckBehind), so that a test that goes on to close a cycle is the one whose check finds it.
func (t *Table) Queued(cf uint32, key []byte) (queued, woken int) {
	hash := t.placed(cf, key)
	sh := t.shard(hash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.index.find(hash, cf, key)
	if e == nil {
		return 0, 0
	}
	for w := e.head; w != nil; w = w.next {
		if !w.counted || w.recheck || w.checking {
			continue
		}
		queued++
		if w.state == waitWoken {
			woken++
		}
	}
	return queued, woken
}

// ShardOf is the shard of the record (cf, key).
func (t *Table) ShardOf(cf uint32, key []byte) int { return int(t.placed(cf, key) & (2*KeyShards - 1)) }

// schedulers calls f on every scheduler of the shard's taken clock slots.
func (sh *shard) schedulers(f func(*scheduler)) {
	if sh.firstSched.clock != nil {
		f(&sh.firstSched)
	}
	for _, s := range sh.moreScheds {
		if s != nil {
			f(s)
		}
	}
}
