package recordlock

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// A Handle, the one allocation of an uncontended Lock, fits a 128-byte size class: the next class
// up, 144 bytes, straddles a third cache line for most handles.
func TestHandleSize(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(Handle{}), uintptr(128))
}
