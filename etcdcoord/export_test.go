package etcdcoord

// WithWatchLag runs lag before the watch applies each batch of events, so that a test can hold
// the watch behind a request's reply.
func WithWatchLag(lag func()) Option { return watchLagOption(lag) }

// WithHandBackLag runs lag in a Release that let a recalled delegation's hand-back go on, once
// it has let go of the coordinator's mutex, so that a test can run Close at that point.
func WithHandBackLag(lag func()) Option { return handBackLagOption(lag) }

// WithRecallWaitLag runs lag when an Acquire starts to wait for the node's recalled delegation
// of its key to end, so that a test can end that delegation only once the Acquire waits for it.
func WithRecallWaitLag(lag func()) Option { return recallWaitLagOption(lag) }

// Closed reports whether Close has begun: a test waits for it to race Close with a release.
func Closed(c *Coordinator) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
