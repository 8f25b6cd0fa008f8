package locktable

import "sync"

// strayFences are the Fences running on handles of a Locker that were released before the fence
// began (lock, stage, Release, Commit is valid while the lease lasts), and the writes of Commits
// that check no handle (TxnOptions.AllowUnlockedWrites). Close releases the keys its handles
// hold, which waits for their fences, but these hold no key: Close waits for them here instead,
// so that once it returns no write of its Txns is in flight and the application may close the
// database.
type strayFences struct {
	mu      sync.Mutex
	closed  bool
	running sync.WaitGroup
}

// enter registers a fence; false once the Locker is closed, and then the fence must not run.
func (s *strayFences) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.running.Add(1)
	return true
}

func (s *strayFences) leave() { s.running.Done() }

// closeAndWait refuses later fences and waits for the running ones to return.
func (s *strayFences) closeAndWait() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.running.Wait()
}
