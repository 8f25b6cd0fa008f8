package recordlock_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/recordlock/recordlock"
)

// Prefix(p) starts at p and ends at the least key after every key that begins with p; 0xFF bytes
// at its end carry into the byte before, and a prefix of 0xFF bytes only has no end.
func TestPrefix(t *testing.T) {
	for _, tc := range []struct {
		p          []byte
		start, end []byte
	}{
		{nil, nil, nil},
		{[]byte{}, []byte{}, nil},
		{[]byte("ab"), []byte("ab"), []byte("ac")},
		{[]byte("a\xff"), []byte("a\xff"), []byte("b")},
		{[]byte("a\xff\xff"), []byte("a\xff\xff"), []byte("b")},
		{[]byte("a\xfe\xff"), []byte("a\xfe\xff"), []byte("a\xff")},
		{[]byte("\x00"), []byte("\x00"), []byte("\x01")},
		{[]byte("\xff"), []byte("\xff"), nil},
		{[]byte("\xff\xff\xff"), []byte("\xff\xff\xff"), nil},
	} {
		r := recordlock.Prefix(tc.p)
		assert.Equal(t, tc.start, r.Start, "Start of Prefix(%q)", tc.p)
		assert.Equal(t, tc.end, r.End, "End of Prefix(%q)", tc.p)
	}

	p := []byte("ab")
	r := recordlock.Prefix(p)
	p[0], p[1] = 'x', 'y'
	assert.Equal(t, recordlock.Range{Start: []byte("ab"), End: []byte("ac")}, r, "the range keeps no reference to p")
}
