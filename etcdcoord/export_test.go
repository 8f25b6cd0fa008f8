package etcdcoord

// WithWatchLag runs lag before the watch applies each batch of events, so that a test can hold
// the watch behind a request's reply.
func WithWatchLag(lag func()) Option { return watchLagOption(lag) }
