// Package etcdcoord is a recordlock.Coordinator on etcd: it makes cluster-scoped record locks
// exclusive across every node that shares an etcd cluster.
//
// # Delegation
//
// A node obtains a delegation for a key: an etcd key under the prefix, created in one Txn only
// if absent and attached to the node's etcd lease, whose TTL outlasts what the node trusts by a
// skew margin. While the node holds a live, un-recalled delegation with at least the requested
// lease left, Acquire admits with no etcd request at all; a cold key costs one Txn. The lease is
// refreshed on demand, when an admission would outlive what the node trusts of it, so an idle
// node makes no requests and its lease, with every delegation on it, simply expires. A delegation
// that no admission has used for the linger period is handed back by a later Acquire.
//
// # Recall
//
// A node that finds the key delegated elsewhere asks for it back by writing a recall key, which
// the holder sees on its watch. The holder stops admitting new local locks of the key, revokes
// the admissions already released (so that a write staged before Release is fenced), waits for
// each live admission to be released or to reach its deadline and revokes it then. Once every
// revocation has returned, it hands the delegation over in one Txn that puts the key on the
// asker's lease and deletes the recall, so the asker admits as soon as its watch reports it;
// if the asker has gone, the key is deleted. A fenced commit in progress therefore delays the
// hand-back until it returns, bounded by what the node trusts of its etcd lease when the recall
// arrives. The asker waits on its watch within its own budget and fails with
// recordlock.ErrTimeout when it runs out; its recall key is then withdrawn, with retries until
// etcd confirms or the node's lease is gone. Askers are served in turn: while one node's recall
// is pending, no other node creates the delegation.
//
// A delegation keeps the admissions it may have to revoke: the live one and at most
// RetainedPerKey released ones whose lease has not ended. When one more released admission
// would be kept, the oldest is revoked at once, so memory does not grow with the lock rate.
//
// # Watch
//
// Each node follows every key under the prefix with one watch. Admissions from a delegation
// happen only while that watch is established; when it breaks, the node reads the prefix afresh
// before admitting again. A delegation that disappears from etcd (deleted, or its lease revoked
// by the cluster) has its admissions revoked at once. Every request and the watch require a
// leader, so a member cut off from the quorum fails fast instead of hanging.
//
// # Time and faults
//
// MintedMono is read from the Locker's clock before the request that grants is sent, and a
// round is admitted only if it ends before the node's etcd lease can, so this node's deadline
// always falls before etcd's. The fencing token is the etcd revision that granted the
// delegation to the node (its key's ModRevision), strictly increasing per key across the
// cluster. When etcd cannot be reached within
// the wait, Acquire fails with recordlock.ErrClusterUnavailable, never with a node-local lock. A
// node that dies stops blocking others when its etcd lease expires, about one TTL later.
package etcdcoord
