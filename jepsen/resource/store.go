// Package resource is the shared resource of the harness: a process outside every node that
// holds one register per key and checks fencing tokens, as a resource outside a recordlock node
// must.
package resource

import (
	"errors"
	"sync"
)

// ErrStaleToken is returned for a request whose fencing token is lower than the highest one the
// register has seen.
var ErrStaleToken = errors.New("resource: stale fencing token")

// Store holds one register per key. A fenced request carries a token: it is served only if the
// token is at least the highest the key's register has seen, and it raises that highest to its
// token, reads included, so that a holder that lost its lock can neither write over a newer
// holder's write nor write after a newer holder has read. An unfenced request (the control
// system's, which has no token) is always served and leaves the highest token alone.
type Store struct {
	mu   sync.Mutex // guards regs
	regs map[string]*register
}

// register is one key's value and the highest fencing token it has seen.
type register struct {
	value   int64
	highest uint64
}

// NewStore returns a Store whose every register holds 0 and has seen no token.
func NewStore() *Store { return &Store{regs: make(map[string]*register)} }

// Token is a request's fencing token; a zero Token is an unfenced request.
type Token struct {
	Value  uint64
	Fenced bool
}

// Read returns key's value. A fenced read with a stale token returns ErrStaleToken and changes
// nothing.
func (s *Store) Read(key string, tok Token) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.reg(key)
	if err := r.admit(tok); err != nil {
		return 0, err
	}
	return r.value, nil
}

// Write sets key's value. A fenced write with a stale token returns ErrStaleToken and changes
// nothing.
func (s *Store) Write(key string, value int64, tok Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.reg(key)
	if err := r.admit(tok); err != nil {
		return err
	}
	r.value = value
	return nil
}

// reg returns key's register, made on first use; s.mu must be held.
func (s *Store) reg(key string) *register {
	r, ok := s.regs[key]
	if !ok {
		r = &register{}
		s.regs[key] = r
	}
	return r
}

// admit applies the fencing rule to a request with tok.
func (r *register) admit(tok Token) error {
	if !tok.Fenced {
		return nil
	}
	if tok.Value < r.highest {
		return ErrStaleToken
	}
	r.highest = tok.Value
	return nil
}
