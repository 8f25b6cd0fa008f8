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

// WithChangeLag runs lag when an Acquire's wait for a change of its record's keys ends, before
// it looks again, so that a test can let the watch apply more events first.
func WithChangeLag(lag func()) Option { return changeLagOption(lag) }

// Seen is the latest etcd revision c's watch has applied.
func Seen(c *Coordinator) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen
}

// Closed reports whether Close has begun: a test waits for it to race Close with a release.
func Closed(c *Coordinator) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
