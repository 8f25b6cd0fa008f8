package etcdcoord

// Stats are a coordinator's figures: the gauges now, the counters since New.
type Stats struct {
	// Delegations is how many keys this node holds a delegation for now.
	Delegations int
	// Retained is how many admissions the delegations keep for revocation now: live ones and
	// released ones whose lease has not ended (at most RetainedPerKey of those per key).
	Retained int
	// RecallsSent counts recall keys this node wrote; RecallsReceived, recalls of its
	// delegations by other nodes.
	RecallsSent, RecallsReceived uint64
	// HandBacks counts delegations handed back to etcd: recalled, released while another node
	// wants the key, idle, given up, or held when Close revoked the node's lease.
	HandBacks uint64
	// Lost counts delegations that disappeared from etcd while this node still trusted the
	// lease they were on, without its own hand-back: deleted, or the lease revoked or expired
	// earlier than this node expected. With no such fault it stays 0.
	Lost uint64
	// Expired counts delegations that lapsed with the node's etcd lease after the node had
	// stopped trusting it, as those of an idle node do: every admission from them had ended.
	Expired uint64
	// RefreshFailures counts refreshes of the node's etcd lease that failed.
	RefreshFailures uint64
	// WatchRestarts counts times the watch broke and was set up again.
	WatchRestarts uint64
	// Deadlocks counts the waits of this node's Txns failed as the victims of cycles across
	// nodes.
	Deadlocks uint64
	// Requests counts the requests this node sent to etcd, failed ones included: every Txn and
	// read, and every grant, refresh and revoke of its lease. The watch stream is not counted.
	Requests uint64
}

// Stats returns the coordinator's figures.
func (c *Coordinator) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Requests = c.etcd.n.Load()
	s.Delegations = len(c.delegs)
	for _, d := range c.delegs {
		s.Retained += len(d.kept)
	}
	return s
}
