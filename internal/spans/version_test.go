package spans

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"pgregory.net/rapid"
)

// Every Version answers as a scan of its own spans does and keeps its shape, however many
// versions are made from it and from each other later: a reader of one never sees the next.
func TestVersionsStayAsTheyWere(t *testing.T) {
	type version struct {
		v     Version
		spans []modelSpan
	}
	rapid.Check(t, func(rt *rapid.T) {
		versions := []version{{}}
		for id := range uint64(rapid.IntRange(1, 40).Draw(rt, "steps")) {
			from := versions[rapid.IntRange(0, len(versions)-1).Draw(rt, "from")]
			next := version{spans: slices.Clone(from.spans)}
			if len(from.spans) > 0 && rapid.Bool().Draw(rt, "without") {
				i := rapid.IntRange(0, len(from.spans)-1).Draw(rt, "which")
				next.v = from.v.Without(from.spans[i].span(), from.spans[i].id)
				next.spans = slices.Delete(next.spans, i, i+1)
			} else {
				s := drawSpan(rt, id)
				next.v = from.v.With(s.span(), s.id)
				next.spans = append(next.spans, s)
			}
			versions = append(versions, next)
			key := []byte(keyGen.Draw(rt, "key"))
			for _, v := range versions {
				checkShape(rt, v.v.root, inOrder(v.spans))
				assert.Equal(rt, len(v.spans) == 0, v.v.Empty())
				want := slices.ContainsFunc(v.spans, func(s modelSpan) bool { return s.holds(key) })
				assert.Equal(rt, want, v.v.Covers(key), "Covers(%q) of a version of %d spans", key, len(v.spans))
			}
		}
	})
}
