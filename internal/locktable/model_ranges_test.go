package locktable

import (
	"slices"

	"pgregory.net/rapid"
)

// The model check's view of range locks in the table (model_test.go): how the table's range
// holders and queued range requests are read to compare them with the model.

// rangeSpaceLocked takes the mutex of the home shard of column family 0 and returns it with the
// column family's range space, or returns nil while it has had no range lock.
func (m *modelRun) rangeSpaceLocked() (*shard, *rangeSpace) {
	sp := m.tab.spaceOf(0)
	if sp == nil {
		return nil, nil
	}
	sp.home.mu.Lock()
	return sp.home, sp
}

// rangeQueuedInTable reports whether r, a range request, is queued in the table, counted, asleep.
func (m *modelRun) rangeQueuedInTable(r *mReq) bool {
	sh, sp := m.rangeSpaceLocked()
	if sh == nil {
		return false
	}
	defer sh.mu.Unlock()
	for _, it := range sp.queue {
		if w := it.w; w.h == r.h || w.upgrade == r.h {
			return asleep(w)
		}
	}
	return false
}

// compareRanges requires the table's range locks and queued range requests to be the model's:
// the holders in mode, the queue in order. A range whose lease has passed counts as gone.
func (m *modelRun) compareRanges(rt *rapid.T) {
	var got, want []string
	if sh, sp := m.rangeSpaceLocked(); sh != nil {
		var hs []string
		sp.ranges.meeting(nil, nil, func(y *Claim) bool {
			if itemOf(y).w == nil && y.dueAt() > m.now {
				hs = append(hs, holderName(y, y.flags()&flagShared != 0))
			}
			return true
		})
		slices.Sort(hs)
		got = append(got, hs...)
		for _, it := range sp.queue {
			got = append(got, waiterName(it.w))
		}
		sh.mu.Unlock()
	}
	var hs []string
	for _, h := range m.holds {
		if h.target >= modelKeys {
			hs = append(hs, holderName(h.h, h.shared))
		}
	}
	slices.Sort(hs)
	want = append(want, hs...)
	for _, r := range m.queue {
		if r.target >= modelKeys {
			want = append(want, r.name())
		}
	}
	if !slices.Equal(got, want) {
		rt.Fatalf("ranges: the table has %v, the model %v\n%s", got, want, m.describe())
	}
}
