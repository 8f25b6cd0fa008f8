package spans

import (
	"bytes"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"pgregory.net/rapid"
)

// A Tree whose spans come and go keeps the treap of its spans, and its searches find exactly what
// a scan of them finds: Containing and Meeting in order of start, then number.
func TestTreeAgainstScan(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var tree Tree[uint64]
		var nodes []*Node[uint64]
		var all []modelSpan
		for id := range uint64(rapid.IntRange(1, 60).Draw(rt, "steps")) {
			if len(all) > 0 && rapid.Bool().Draw(rt, "remove") {
				i := rapid.IntRange(0, len(all)-1).Draw(rt, "which")
				tree.Remove(nodes[i])
				nodes = slices.Delete(nodes, i, i+1)
				all = slices.Delete(all, i, i+1)
			} else {
				s := drawSpan(rt, id)
				n := &Node[uint64]{}
				n.Init(s.id, s.span(), s.id)
				tree.Insert(n)
				nodes = append(nodes, n)
				all = append(all, s)
			}
			assert.Equal(rt, len(all), tree.Len())
			checkShape(rt, tree.root, inOrder(all))

			q := drawSpan(rt, 0)
			var holds, meets []uint64
			encloses := false
			for _, s := range inOrder(all) {
				if s.holds(q.start) {
					holds = append(holds, s.id)
				}
				if s.meets(q.start, q.end) {
					meets = append(meets, s.id)
				}
				inside := s.end == nil || q.end != nil && bytes.Compare(q.end, s.end) <= 0
				encloses = encloses || bytes.Compare(s.start, q.start) <= 0 && inside
			}
			var gotHolds, gotMeets []uint64
			tree.Containing(q.start, func(id uint64) bool { gotHolds = append(gotHolds, id); return true })
			tree.Meeting(q.start, q.end, func(id uint64) bool { gotMeets = append(gotMeets, id); return true })
			assert.Equal(rt, holds, gotHolds, "Containing(%q)", q.start)
			assert.Equal(rt, meets, gotMeets, "Meeting(%q, %q)", q.start, q.end)
			assert.Equal(rt, len(holds) > 0, tree.Covers(q.start), "Covers(%q)", q.start)
			assert.Equal(rt, encloses, tree.Encloses(q.start, q.end), "Encloses(%q, %q)", q.start, q.end)
		}
	})
}
