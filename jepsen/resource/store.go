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

// ErrKeyTwice is returned for a WriteAll that names a key twice.
var ErrKeyTwice = errors.New("resource: a key written twice")

// Store holds one register per key. A fenced request carries a token: it is served only if the
// token is at least the highest the key's register has seen, and it raises that highest to its
// token, reads included, so that a holder that lost its lock can neither write over a newer
// holder's write nor write after a newer holder has read. An unfenced request (the control
// system's, which has no token) is always served and leaves the highest token alone.
//
// A shared read (ReadShared) is a reader's under a shared lock, which readers on other nodes may
// hold at the same time with other tokens: it is served if its token is at least that of the
// last fenced write the register applied, so that a reader that lost its lock cannot read a
// later writer's value, and it raises the highest token as a read does.
type Store struct {
	mu   sync.Mutex // guards regs
	regs map[string]*register
}

// register is one key's value, the highest fencing token it has seen and the token of the last
// fenced write it applied.
type register struct {
	value   int64
	highest uint64
	written uint64
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

// ReadShared returns key's value for a reader under a shared lock. A fenced read whose token is
// lower than the last fenced write's returns ErrStaleToken and changes nothing.
func (s *Store) ReadShared(key string, tok Token) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.reg(key)
	if tok.Fenced {
		if tok.Value < r.written {
			return 0, ErrStaleToken
		}
		r.highest = max(r.highest, tok.Value)
	}
	return r.value, nil
}

// Write sets key's value. A fenced write with a stale token returns ErrStaleToken and changes
// nothing.
func (s *Store) Write(key string, value int64, tok Token) error {
	return s.WriteAll([]Write{{Key: key, Value: value, Token: tok}})
}

// Write is one key's part of WriteAll.
type Write struct {
	Key   string
	Value int64
	Token Token
}

// WriteAll sets every key of ws to its value, atomically, as a transfer between two accounts
// must be: a writer killed between two separate writes would leave the total wrong whatever its
// lock did. If any write's token is stale for its key it returns ErrStaleToken and changes
// nothing; so it does, with ErrKeyTwice, if ws names a key twice.
func (s *Store) WriteAll(ws []Write) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, w := range ws {
		if w.Token.Fenced && w.Token.Value < s.reg(w.Key).highest {
			return ErrStaleToken
		}
		for _, o := range ws[:i] {
			if o.Key == w.Key {
				return ErrKeyTwice
			}
		}
	}
	for _, w := range ws {
		r := s.reg(w.Key)
		_ = r.admit(w.Token) // checked above
		if w.Token.Fenced {
			r.written = w.Token.Value
		}
		r.value = w.Value
	}
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
