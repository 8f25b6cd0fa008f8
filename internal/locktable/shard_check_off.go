//go:build !invariants

package locktable

// The checker of a build without the tag invariants does nothing, and its calls compile to
// nothing (shard_check.go is the checker of a build with it).

func (sh *shard) checkLocked() {}

func (g *waitGraph) checkLocked() {}

type tableChecks struct{}

func (*tableChecks) disowned(*Claim) {}
