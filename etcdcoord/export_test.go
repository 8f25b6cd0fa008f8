package etcdcoord

// WithWatchLag runs lag before the watch applies each batch of events, so that a test can hold
// the watch behind a request's reply.
func WithWatchLag(lag func()) Option { return watchLagOption(lag) }

// WithHandBackLag runs lag in a Release that started handing its key back, once it has let go
// of the coordinator's mutex, so that a test can run Close at that point.
func WithHandBackLag(lag func()) Option { return handBackLagOption(lag) }

// WantedHere reports whether a lock of c has found its delegation of key being handed back on
// release (contention.go): a test waits for it instead of sleeping.
func WantedHere(c *Coordinator, key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.contended[key].wantedHere
}

// Closed reports whether Close has begun: a test waits for it to race Close with a release.
func Closed(c *Coordinator) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
