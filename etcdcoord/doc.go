// Package etcdcoord is a recordlock.Coordinator on etcd: it makes cluster-scoped record locks
// exclusive across every node that shares an etcd cluster.
//
// A node makes one coordinator over its etcd client and gives it to the Lockers of its database
// with Locker.SetCoordinator, which every Locker of the database sees, or with
// recordlock.WithCoordinator. ExampleNew runs a node on an embedded etcd; in a function of
// your own:
//
//	// lockOrder writes order/42 to the node's RocksDB, db, under a cluster-scoped lock.
//	func lockOrder(ctx context.Context, db *grocksdb.DB, endpoints []string) error {
//		cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
//		if err != nil {
//			return err
//		}
//		defer cli.Close()
//		l, err := recordlock.New(db)
//		if err != nil {
//			return err
//		}
//		defer l.Close()
//		// New fails with ErrNameTaken while another live node has the name.
//		coord, err := etcdcoord.New(cli, "node-a", etcdcoord.WithTimestamp(l.Timestamp), etcdcoord.WithLogger(slog.Default()))
//		if err != nil {
//			return err
//		}
//		defer coord.Close() // hands every delegation back at once
//		l.SetCoordinator(coord)
//
//		h, err := l.Lock(ctx, []byte("order/42"), recordlock.Options{Lease: 10 * time.Second})
//		if err != nil {
//			return err // ErrTimeout: another node held it; ErrClusterUnavailable: etcd could not be reached
//		}
//		defer h.Release()
//		wo := grocksdb.NewDefaultWriteOptions()
//		defer wo.Destroy()
//		return h.Fence(func() error { return db.Put(wo, []byte("order/42"), []byte("placed")) }) // lands only while the lease is live
//	}
//
// The package is tested with etcd v3.6.16, server and client: require the client at that
// version before go mod tidy picks the newest (go get go.etcd.io/etcd/client/v3@v3.6.16, and
// go.etcd.io/etcd/server/v3@v3.6.16 to embed a server). Command examples/cluster of the
// repository runs three nodes.
//
// # What it protects
//
// Cluster scope makes the fenced writes of every node to its own replica of a record (its
// RocksDB) take turns: while a node's handle is live and its fenced commits run, no other node
// is admitted to the key. A resource outside the node (a shared database, a service, a file)
// must also check Handle.Token, the etcd revision that granted the delegation, strictly
// increasing per key, and refuse a token lower than one it has seen: a process pause, or an
// operator deleting the delegation in etcd, can deliver a holder's write after the key has moved
// on.
//
// # Delegation
//
// A node obtains a delegation for a key: an etcd key under the prefix, created in one Txn only
// if absent and attached to the node's etcd lease, whose TTL outlasts what the node trusts by a
// skew margin. While the node holds a live, un-recalled delegation with at least the requested
// lease left, Acquire admits with no etcd request at all; a cold key costs one Txn. The lease is
// refreshed on demand, when an admission would outlive what the node trusts of it, so an idle
// node makes no requests and its lease, with every delegation on it, simply expires: that is
// counted in Stats.Expired, not as a loss, and not logged. An Acquire never refreshes the lease
// twice in a row: each refresh is followed by an admission, a cold Txn or a wait. A delegation
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
// hand-back until it returns, bounded by the node's etcd lease as the node keeps refreshing it:
// the hand-back waits for the commit for as long as the node trusts that lease, however often
// it was refreshed since the recall arrived, and no longer. A recall that arrives once the node
// has stopped trusting its lease finds every admission ended and hands the key over as any
// other. The asker waits on its watch within its own budget and fails with
// recordlock.ErrTimeout when it runs out (from TryLock, an error that matches
// recordlock.ErrLocked too): a Lock on another node never takes the key from a live holder. Its
// recall key is then withdrawn, with retries until etcd confirms or the node's lease is gone.
// Askers are served in turn: while one node's recall is pending, no other node creates the
// delegation.
//
// A recall asks for one hand-back. A key is handed back on release only while another node
// waits for it: its recall has reached the holder, which then hands the key over as soon as
// its last live admission is released, or at once if none is live. Once no other node waits,
// the node that locks the key keeps its delegation, and its repeat locks make no etcd request,
// so one lock on another node does not cost a hot key a round trip per lock. Nodes that take
// turns on a key therefore pay, per Lock that finds the key on the other node, the asker's Txn
// writing the recall and the holder's Txn handing the key over, with two watch deliveries. A
// Release makes no request and does not wait for etcd: the hand-back runs in a goroutine of the
// coordinator, so a Locker's Close or a Txn's Commit does not wait for it either.
//
// A delegation keeps the admissions it may have to revoke: the live one and at most
// RetainedPerKey released ones whose lease has not ended. When one more released admission
// would be kept, the oldest is revoked at once, so memory does not grow with the lock rate.
//
// # Shared locks
//
// A shared lock with cluster scope (recordlock.Options{Shared: true, Scope:
// recordlock.ScopeCluster}) is shared among the handles of one node and exclusive between nodes:
// a delegation belongs to one node at a time, and it admits every reader of its node, each with
// a round of its own and the delegation's fencing token. A reader on another node recalls the
// key as a writer does: the holding node admits no new holder of the key, shared or exclusive,
// waits until each of its readers has released (or reached its deadline), and hands the key
// over. So readers on two nodes take turns, and a reader waits for every reader of the node that
// has the key. Within a node, readers and writers queue for the local key as with node scope.
//
// # Watch
//
// Each node follows every key under the prefix with one watch. Admissions from a delegation
// happen only while that watch is established; when it breaks, the node reads the prefix afresh
// before admitting again. The watch breaks when etcd ends it, and when the client's connection
// to etcd stops being ready (with several endpoints, to every member): the client would retry
// the watch in place, and the node would go on admitting while blind to recalls. Every request
// and the watch require a leader, so a member cut off from the quorum fails fast instead of
// hanging, and the node stops admitting from its delegations until its watch is back.
//
// A delegation that disappears from etcd while the node still trusts the lease it is on
// (deleted, its lease revoked, or replaced by a later delegation this node's own Txn created),
// and that the node was not handing back itself, has its admissions revoked at once, counts in
// Stats.Lost and is logged: with no fault, Lost stays 0. The node never admits from a
// delegation etcd no longer has, and that includes one it has handed back or seen end: a watch
// event or a read that reports such a delegation late is never adopted again. One that disappears
// with the lease after the node stopped trusting it, as an idle node's does, counts in
// Stats.Expired: every admission from it had already ended.
//
// # Time and faults
//
// MintedMono is read from the Locker's clock before the request that grants is sent, and a
// round is admitted only if it ends before the node's etcd lease can, so this node's deadline
// always falls before etcd's. The fencing token is the etcd revision that granted the
// delegation to the node (its key's ModRevision), strictly increasing per key across the
// cluster. When etcd cannot be reached within the wait, Acquire fails with
// recordlock.ErrClusterUnavailable, never with a node-local lock. A node that dies stops
// blocking others when its etcd lease expires: one TTL (WithTTL, DefaultTTL) after its last
// refresh, and etcd restarts that TTL whenever its leader changes.
//
// # Deploying
//
//   - A lock's Lease must be at most the TTL less the skew margin (WithSkew, DefaultSkew); a
//     longer one fails with recordlock.ErrInvalidOptions. A round must end before the node's
//     etcd lease, measured from before its last refresh, so a lock at that longest Lease
//     refreshes the lease on every admission; one shorter by d refreshes at most once per d.
//   - Node names must be unique: New registers the name on the node's lease and fails with
//     ErrNameTaken while another live node has it. Deleting the prefix deletes the
//     registrations too, and lets New admit a second coordinator of a running one's name;
//     the two still tell their recalls apart by the lease each names.
//   - Give the client every endpoint of the cluster and gRPC keepalives, so that a dead
//     connection is noticed and another member used: DialKeepAliveTime and
//     DialKeepAliveTimeout of a few seconds.
//   - Use TLS (clientv3.Config.TLS) and a user whose role grants read-write on the prefix only
//     (etcdctl role grant-permission recordlock --prefix=true readwrite /recordlock/); the
//     coordinator also grants, refreshes and revokes its own lease.
//   - etcd 3.3 or later is required (nested Txns, lease comparisons); the tests run 3.6.
//   - If the Locker runs on a clock of its own, pass the same one with WithClock.
//   - Do not let nodes suspend (laptop sleep, VM pause and resume): the monotonic clock a lease
//     runs on stops while the system sleeps, so a resumed node would trust a lease etcd has
//     already let go.
//
// A client for a three-member cluster:
//
//	cli, err := clientv3.New(clientv3.Config{
//		Endpoints:            []string{"etcd-1:2379", "etcd-2:2379", "etcd-3:2379"},
//		DialTimeout:          5 * time.Second,
//		DialKeepAliveTime:    5 * time.Second,
//		DialKeepAliveTimeout: 5 * time.Second,
//		TLS:                  tlsConfig,
//		Username:             "recordlock",
//		Password:             password,
//	})
//	if err != nil {
//		return err
//	}
//	defer cli.Close()
//
// # Operations
//
// Coordinator.Stats reports the delegations held, recalls sent and received, hand-backs, lost
// and expired delegations, lease refresh failures, watch restarts and retained admissions.
// Failed hand-backs and recall withdrawals, watch restarts and lost delegations are logged
// through WithLogger. Once the etcd client is closed, a failed hand-back is logged once and
// not retried: its keys lapse with the node's lease.
// The package's tests start embedded etcd servers on loopback, so they need no external server;
// they also run the protocol against an in-process simulation of etcd under a seeded scheduler.
package etcdcoord
