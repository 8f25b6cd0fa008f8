package recordlock

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// A Txn, one allocation of every transaction, stays in the 256-byte size class with its
// savepoints pointer.
func TestTxnSize(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(Txn{}), uintptr(256))
}
