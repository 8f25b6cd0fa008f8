package locktable

import (
	"sync"

	"github.com/petermattis/goid"
)

// strayFences are the Fences running on handles of a Locker that were released before the fence
// began (lock, stage, Release, Commit is valid while the lease lasts), and the writes of Commits
// that check no handle (TxnOptions.AllowUnlockedWrites). Close releases the keys its handles
// hold, which waits for their fences, but these hold no key: Close waits for them here instead,
// so that once it returns no write of its Txns is in flight and the application may close the
// database. A Close called by the commit of such a fence does not wait for the fences its own
// goroutine runs, which could end only once it returned; they end when their commits return.
type strayFences struct {
	mu     sync.Mutex
	closed bool
	n      int           // the running fences
	by     map[int64]int // the running fences by the goroutine that runs them
	ended  sync.Cond     // signalled as a fence ends, with mu
}

// enter registers a fence of the calling goroutine; false once the Locker is closed, and then
// the fence must not run. The same goroutine calls leave once it ends.
func (s *strayFences) enter() bool {
	g := goid.Get()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.by == nil {
		s.by = map[int64]int{}
	}
	s.by[g]++
	s.n++
	return true
}

func (s *strayFences) leave() {
	g := goid.Get()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by[g]--; s.by[g] == 0 {
		delete(s.by, g)
	}
	s.n--
	s.ended.Broadcast() // a Cond's Broadcast needs no L: closeAndWait sets it before it waits
}

// closeAndWait refuses later fences and waits for the running ones to return, except those of
// the calling goroutine.
func (s *strayFences) closeAndWait() {
	g := goid.Get()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.ended.L == nil {
		s.ended.L = &s.mu
	}
	for s.n > s.by[g] {
		s.ended.Wait()
	}
}
