//go:build invariants

package locktable

import "github.com/recordlock/recordlock/internal/invariants"

// The probes of what the table counts only in a build with the tag invariants (package
// internal/invariants), for the tests built with it that bound a cost.

// Visited counts the holders and queued requests VisitHolders and VisitWaits have read.
func (t *Table) Visited() uint64 {
	return t.sumCounts(func(c *shardCounts) *invariants.Counter { return &c.visited })
}

// SharersRead counts the sharers read to settle every lapsed one (settleOtherSharers).
func (t *Table) SharersRead() uint64 {
	return t.sumCounts(func(c *shardCounts) *invariants.Counter { return &c.sharersRead })
}

// sumCounts sums the counter of every shard that counter picks, each under its shard's mutex.
func (t *Table) sumCounts(counter func(*shardCounts) *invariants.Counter) uint64 {
	var n uint64
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += counter(&sh.counts).Load()
		sh.mu.Unlock()
	}
	return n
}
