package locktable

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// otherOwner is an owner of a second type.
type otherOwner struct{ name string }

func (o *otherOwner) Name() string { return o.name }

// TestOwnerKeyIsIdentity checks that owners have equal keys exactly when they are equal as
// Owners: the same pointer through any copy of the interface, and no other (an owner of another
// type, or another owner of the same name).
func TestOwnerKeyIsIdentity(t *testing.T) {
	a, b := &testTxn{name: "t"}, &testTxn{name: "t"}
	var oa Owner = a
	owners := []Owner{a, b, &otherOwner{name: "t"}, nil}
	for i, x := range owners {
		for j, y := range owners {
			assert.Equal(t, x == y, keyOf(x) == keyOf(y), "owners %d and %d", i, j)
		}
	}
	assert.Equal(t, keyOf(a), keyOf(oa))
	assert.Nil(t, keyOf(nil))
	waiting := map[ownerKey]int{keyOf(a): 1, keyOf(b): 2}
	assert.Equal(t, 1, waiting[keyOf(oa)])
	assert.Len(t, waiting, 2)
}
