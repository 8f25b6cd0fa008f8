//go:build invariants

package locktable

// The probes of what the table counts only in a build with the tag invariants (package
// internal/invariants), for the tests built with it that bound a cost.

// Visited counts the holders and queued requests VisitHolders and VisitWaits have read.
func (t *Table) Visited() uint64 {
	var n uint64
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += sh.counts.visited.Load()
		sh.mu.Unlock()
	}
	return n
}

// SharersRead counts the sharers exclusive requests that queued read to settle every lapsed one.
func (t *Table) SharersRead() uint64 {
	var n uint64
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += sh.counts.sharersRead.Load()
		sh.mu.Unlock()
	}
	return n
}
