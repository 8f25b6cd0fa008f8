package recordlock

import "fmt"

// The errors of input a call refuses before it locks or stages anything: keys and contexts.

// Each invalid key gets an error that says which rule it broke; all of them match ErrInvalidKey.
var (
	errNilKey   = fmt.Errorf("%w; got a nil key", ErrInvalidKey)
	errEmptyKey = fmt.Errorf("%w; got an empty key", ErrInvalidKey)
)

// invalidKey returns the error for a key that is nil, empty or longer than maxKeyLen: the
// caller has found it invalid.
func invalidKey(key []byte) error {
	switch {
	case key == nil:
		return errNilKey
	case len(key) == 0:
		return errEmptyKey
	default:
		return fmt.Errorf("%w; got a key of %d bytes", ErrInvalidKey, len(key))
	}
}

// errNilContext is what a call that takes a ctx returns for a nil one, as net/http's
// NewRequestWithContext does: a nil ctx is a bug of the caller's, reported before anything is
// locked or queued rather than as a nil-pointer panic.
var errNilContext = fmt.Errorf("%w: nil Context", ErrInvalidOptions)
