package locktable

import "sync"

// strayFences are the Fences running on handles of a Locker that were released before the fence
// began (lock, stage, Release, Commit is valid while the lease lasts), and the writes of Commits
// that check no handle (TxnOptions.AllowUnlockedWrites). Close releases the keys its handles
// hold, which waits for their fences, but these hold no key: Close waits for them here instead,
// so that once it returns no write of its Txns is in flight and the application may close the
// database. A Close called inside users' commits does not wait for as many fences as the commits
// it is inside: they could be its own, which end only once it returns (commitframe.go).
type strayFences struct {
	mu     sync.Mutex
	closed bool
	n      int       // the running fences
	ended  sync.Cond // signalled as a fence ends, with mu
}

// enter registers a fence; false once the Locker is closed, and then the fence must not run.
// leave ends it.
func (s *strayFences) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.n++
	return true
}

func (s *strayFences) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n--
	s.ended.Broadcast() // a Cond's Broadcast needs no L: closeAndWait sets it before it waits
}

// closeAndWait refuses later fences and waits for the running ones to return, all but as many
// as the users' commits the caller is inside.
func (s *strayFences) closeAndWait() {
	own := userCommitsOnStack(false)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.ended.L == nil {
		s.ended.L = &s.mu
	}
	for s.n > own {
		s.ended.Wait()
	}
}
