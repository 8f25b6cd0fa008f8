package recordlock

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// check accepts every range whose End is nil or after Start, and refuses the others with an
// error matching ErrInvalidKey; contains agrees with Start <= k < End.
func TestRangeCheckAndContains(t *testing.T) {
	for _, tc := range []struct {
		name  string
		r     Range
		valid bool
	}{
		{"the whole column family", Range{}, true},
		{"from a key, unbounded", Range{Start: []byte("m")}, true},
		{"up to a key from the first", Range{End: []byte("m")}, true},
		{"one key wide", Range{Start: []byte("a"), End: []byte("a\x00")}, true},
		{"End equal to Start", Range{Start: []byte("a"), End: []byte("a")}, false},
		{"End before Start", Range{Start: []byte("b"), End: []byte("a")}, false},
		{"an empty, non-nil End", Range{End: []byte{}}, false},
		{"an empty End after an empty Start", Range{Start: []byte{}, End: []byte{}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.check()
			if tc.valid {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidKey)
			assert.Contains(t, err.Error(), "recordlock: invalid range: End ")
		})
	}

	r := Range{Start: []byte("b"), End: []byte("d")}
	for key, in := range map[string]bool{"a": false, "b": true, "b\x00": true, "c\xff": true, "d": false, "d\x00": false} {
		assert.Equal(t, in, r.contains([]byte(key)), "%q in [b, d)", key)
	}
	assert.True(t, Range{}.contains([]byte("\xff\xff\xff")), "an unbounded range has no last key")
}
