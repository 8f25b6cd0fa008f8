package spans

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"pgregory.net/rapid"
)

// Containing and Meeting find exactly the spans a scan of them all finds, in order of start.
func TestIndexAgainstScan(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		key := rapid.SliceOfN(rapid.ByteRange('a', 'e'), 0, 3)
		var x Index[int]
		var all []modelSpan
		for i := range rapid.IntRange(0, 40).Draw(rt, "n") {
			s := modelSpan{start: key.Draw(rt, "start"), id: uint64(i + 1)}
			if !rapid.Bool().Draw(rt, "unbounded") {
				s.end = append(bytes.Clone(s.start), key.Draw(rt, "more")...)
				s.end = append(s.end, 'a') // after start
			}
			all = append(all, s)
			x.Insert(s.start, s.end, i)
		}
		assert.Equal(rt, len(all), x.Len())
		checkShape(rt, x.tree.root, inOrder(all))
		k := key.Draw(rt, "key")
		q := modelSpan{start: k, end: append(bytes.Clone(k), 'c')}
		var holds, meets []int
		for i, s := range all {
			if s.holds(k) {
				holds = append(holds, i)
			}
			if s.meets(q.start, q.end) {
				meets = append(meets, i)
			}
		}
		var gotHolds, gotMeets []int
		x.Containing(k, func(i int) bool { gotHolds = append(gotHolds, i); return true })
		x.Meeting(q.start, q.end, func(i int) bool { gotMeets = append(gotMeets, i); return true })
		for _, got := range [][]int{gotHolds, gotMeets} {
			assert.True(rt, slices.IsSortedFunc(got, func(a, b int) int { return bytes.Compare(all[a].start, all[b].start) }), "in order of start")
		}
		slices.Sort(gotHolds)
		slices.Sort(gotMeets)
		assert.Equal(rt, holds, gotHolds, "spans holding %q", k)
		assert.Equal(rt, meets, gotMeets, "spans meeting %q", q)
	})
}

// BenchmarkContaining is finding the span that holds a key among m disjoint ones.
func BenchmarkContaining(b *testing.B) {
	for _, m := range []int{1000, 8000, 64000} {
		b.Run(fmt.Sprintf("m=%d", m), func(b *testing.B) {
			var x Index[int]
			for i := range m {
				k := fmt.Appendf(nil, "r%06d", i)
				x.Insert(k, append(bytes.Clone(k), 0xff), i)
			}
			key := fmt.Appendf(nil, "r%06d/x", m/2)
			b.ReportAllocs()
			for b.Loop() {
				x.Containing(key, func(int) bool { return false })
			}
		})
	}
}
