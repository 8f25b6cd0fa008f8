package httpdebug

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/recordlock/recordlock"
	"github.com/recordlock/recordlock/internal/debugview"
)

// database is what the page and the JSON show of one database: at most limit holders and limit
// waits, with the numbers left out.
type database struct {
	name         string
	stats        recordlock.Stats
	locks        []recordlock.LockInfo // sorted by record, then by when they were acquired
	waits        []recordlock.WaitInfo // sorted by record, in queue order
	locksOmitted int
	waitsOmitted int
	// families names, by ID, the column families of the holders read, and 0 "default". A
	// WaitInfo has only the ID, so a wait's family is named from them, or not at all when no
	// holder of that family was read (its key is being handed over, or past the limit the
	// holders were left out).
	families map[uint32]string
}

// record identifies a lock: a key in a column family, or a range of one (key is its start, and
// end its end, "" with no upper bound).
type record struct {
	cf      uint32
	key     string
	isRange bool
	end     string
}

func lockRecord(i recordlock.LockInfo) record {
	return record{i.ColumnFamilyID, string(i.Key), i.IsRange, string(i.RangeEnd)}
}

func waitRecord(i recordlock.WaitInfo) record {
	return record{i.ColumnFamilyID, string(i.Key), i.IsRange, string(i.RangeEnd)}
}

// waitKind is what decides which holders a wait waits for (holderIndex.of): its record and mode.
type waitKind struct {
	r      record
	shared bool
}

func kindOf(w recordlock.WaitInfo) waitKind { return waitKind{waitRecord(w), w.Shared} }

// read copies what the page shows of l's database. Past the limit it keeps the longest waits
// (in the order they are queued, which the wait-for graph draws), then the holders those wait
// for, read in the same visit of each shard as the waits, so that the wait-for graph is whole:
// the holders of the keys waited for and the ranges over them (the holders of keys inside a
// waiting range that no key request waits for are not in that visit, and come from Locks); other
// holders fill the rest in the order Locks yields them, and Locks stops as soon as the rows are
// full, having copied no more than the shards it visited. Stats is read last, and the holders
// left out are Stats.Held less those shown: under churn, an estimate.
func read(name string, l *recordlock.Locker, limit int) database {
	d := database{name: name, families: map[uint32]string{0: "default"}}
	waits, holders := l.WaitsAndHolders(debugview.Pass{}) // see debugview
	for _, h := range holders {
		d.families[h.ColumnFamilyID] = h.ColumnFamily
	}
	if len(waits) > limit {
		d.waitsOmitted = len(waits) - limit
		longest := make([]int, len(waits))
		for i := range longest {
			longest[i] = i
		}
		slices.SortStableFunc(longest, func(a, b int) int { return cmp.Compare(waits[b].Waited, waits[a].Waited) })
		kept := make([]bool, len(waits))
		for _, i := range longest[:limit] {
			kept[i] = true
		}
		n := 0
		for i, w := range waits {
			if kept[i] {
				waits[n] = w
				n++
			}
		}
		waits = waits[:n]
	}
	d.waits = waits

	// The holders the kept waits wait for, as the page and the graph join them (holderIndex,
	// which wants them in the order of d.locks): a holder of a key waited for, or a range over
	// it. Once per record and mode, as the page lists them, so many waits on a key of many
	// sharers stay cheap.
	slices.SortFunc(holders, byRecord)
	index := newHolderIndex(holders)
	waited := make([]bool, len(holders))
	seen := make(map[waitKind]bool, len(waits))
	for _, w := range waits {
		if k := kindOf(w); !seen[k] {
			seen[k] = true
			for _, i := range index.of(w) {
				waited[i] = true
			}
		}
	}
	listed := make(map[record]bool, len(waits))
	complete := true
	for i, h := range holders {
		r := lockRecord(h)
		if !waited[i] {
			continue
		}
		if len(d.locks) == limit {
			complete = false
			break
		}
		d.locks = append(d.locks, h)
		listed[r] = true
	}
	if complete {
		for info := range l.Locks() {
			d.families[info.ColumnFamilyID] = info.ColumnFamily
			if listed[lockRecord(info)] {
				continue // read with its waits
			}
			if len(d.locks) == limit {
				complete = false
				break
			}
			d.locks = append(d.locks, info)
		}
	}
	d.stats = l.Stats()
	if !complete {
		d.locksOmitted = max(1, d.stats.Held-len(d.locks))
	}

	slices.SortFunc(d.locks, byRecord)
	slices.SortStableFunc(d.waits, func(a, b recordlock.WaitInfo) int {
		return cmp.Or(cmp.Compare(a.ColumnFamilyID, b.ColumnFamilyID), bytes.Compare(a.Key, b.Key))
	})
	return d
}

// byRecord orders holders by column family, key and when they were taken: the order of
// database.locks.
func byRecord(a, b recordlock.LockInfo) int {
	return cmp.Or(cmp.Compare(a.ColumnFamilyID, b.ColumnFamilyID), bytes.Compare(a.Key, b.Key),
		cmp.Compare(a.AcquiredAt, b.AcquiredAt))
}
