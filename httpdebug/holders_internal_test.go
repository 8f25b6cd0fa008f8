package httpdebug

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/recordlock/recordlock"
)

// holderIndex.of joins a wait to the holders it waits for: every holder of its key, and the
// holders whose ranges meet its key or range, or for a range wait whose keys lie inside it, unless
// both are shared. Ranges are half-open, and a column family's holders never meet another's.
func TestHolderIndexOf(t *testing.T) {
	key := func(k string, shared bool) recordlock.LockInfo {
		return recordlock.LockInfo{Key: []byte(k), Shared: shared}
	}
	span := func(start, end string, shared bool) recordlock.LockInfo {
		l := recordlock.LockInfo{Key: []byte(start), Shared: shared, IsRange: true}
		if end != "" {
			l.RangeEnd = []byte(end)
		}
		return l
	}
	locks := []recordlock.LockInfo{ // in the order of database.locks
		span("a", "c", false),                 // 0
		key("b", true),                        // 1
		key("b", true),                        // 2
		key("c", false),                       // 3
		span("d", "f", true),                  // 4
		key("e", true),                        // 5
		key("f", false),                       // 6
		span("m", "", true),                   // 7
		{Key: []byte("b"), ColumnFamilyID: 1}, // 8
		{Key: []byte("c"), ColumnFamilyID: 1, IsRange: true}, // 9: [c, ∞) in column family 1
	}
	keyWait := func(k string, shared bool) recordlock.WaitInfo {
		return recordlock.WaitInfo{Key: []byte(k), Shared: shared}
	}
	rangeWait := func(start, end string, shared bool) recordlock.WaitInfo {
		w := recordlock.WaitInfo{Key: []byte(start), Shared: shared, IsRange: true}
		if end != "" {
			w.RangeEnd = []byte(end)
		}
		return w
	}
	x := newHolderIndex(locks)
	for name, tc := range map[string]struct {
		w    recordlock.WaitInfo
		want []int
	}{
		"key b, exclusive":                {keyWait("b", false), []int{0, 1, 2}},
		"key b, shared":                   {keyWait("b", true), []int{0, 1, 2}},
		"key c, past [a, c)":              {keyWait("c", false), []int{3}},
		"key e, exclusive":                {keyWait("e", false), []int{4, 5}},
		"key e, shared":                   {keyWait("e", true), []int{5}},
		"key z, shared":                   {keyWait("z", true), nil},
		"key z, exclusive":                {keyWait("z", false), []int{7}},
		"key b of column family 1":        {recordlock.WaitInfo{Key: []byte("b"), ColumnFamilyID: 1}, []int{8}},
		"range [b, e), exclusive":         {rangeWait("b", "e", false), []int{0, 1, 2, 3, 4}},
		"range [b, e), shared":            {rangeWait("b", "e", true), []int{0, 3}},
		"range [a, b)":                    {rangeWait("a", "b", false), []int{0}},
		"range [ca, d), between all":      {rangeWait("ca", "d", false), nil},
		"range [f, ∞), shared":            {rangeWait("f", "", true), []int{6}},
		"range [f, ∞), exclusive":         {rangeWait("f", "", false), []int{6, 7}},
		"range [a, ∞) of column family 1": {recordlock.WaitInfo{Key: []byte("a"), ColumnFamilyID: 1, IsRange: true}, []int{8, 9}},
	} {
		assert.Equal(t, tc.want, x.of(tc.w), name)
	}
}
