// Package etcdcoord is a recordlock.Coordinator on etcd: it keeps cluster-scoped record locks
// meaning across every node that shares an etcd cluster. An exclusive lock on any node excludes
// every holder of the record on every node; shared locks of a record are held on any number of
// nodes at once.
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
// RocksDB) take turns: while a node's exclusive handle is live and its fenced commits run, no
// other node is admitted to the record, and while a shared handle's are, no other node is
// admitted to write it. A resource outside the node (a shared database, a service, a file)
// must also check Handle.Token, the etcd revision that granted the node's delegation, and
// refuse a write whose token is lower than one it has seen: a process pause, or an operator
// deleting the delegation in etcd, can deliver a holder's write after the record has moved on.
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
// would be kept, the oldest is let go and revoked at once, so memory does not grow with the
// lock rate. That revocation runs in the coordinator's background: it waits for a Fence the
// admission may be running, and the Lock that let it go waits for no other handle. A
// hand-back of the key, Close's included, waits for it as for any revocation.
//
// # Records and modes
//
// A record is (column family name, key): the same key bytes in two column families are two
// records on every node, and a column family is the same record space on every node that names
// it alike, whatever ID it has in each database. Range locks are node-scoped.
//
// A delegation is held in a mode. An exclusive delegation is held by one node, with no other
// delegation of the record beside it, and admits every holder of its node, readers and writers.
// Shared delegations are held by any number of nodes at once and admit readers only. A node
// with a delegation that admits a lock's mode admits it with no etcd request, each holder with a
// round of its own and the delegation's fencing token. A reader that finds the record held only
// shared creates its node's shared delegation in one Txn and recalls nobody. A writer recalls
// every holding node, shared or exclusive, and is granted once the last has handed back; a node
// that holds the record shared and wants to write recalls the others and turns its own
// delegation exclusive in its own Txn. A reader that finds the record held exclusive elsewhere
// recalls it too, and the holding node, once its live holders of the record are all readers,
// keeps them and turns its delegation shared (the Linux DLM's down-conversion) instead of
// waiting for them: one Txn deletes its exclusive key and puts its own shared key and the
// asker's. While it turns, it admits readers only. A node's Txn that changes its delegation's
// mode may land with its reply lost: the node follows the change when its watch reports it, as
// it follows one whose reply arrived, and never takes the old key's deletion for a loss. Within
// a node, readers and writers queue for the local key as with node scope.
//
// Fairness spans the nodes: while a writer's recall is pending, no node creates a shared
// delegation of the record and no holding node admits a new holder, so a stream of readers on
// other nodes never starves a writer, and a reader that asks after the writer is served after
// it. Tokens follow the order of grants: a writer's token exceeds every earlier holder's, a
// reader's every earlier writer's; readers on two nodes may share a token.
//
// # Deadlocks across nodes
//
// A Txn's lock that waits for another node is part of the wait-for graph with the waits within
// each node, so a cycle through any mix of them is broken as one within a node is: one request
// of the cycle fails with a *recordlock.DeadlockError that names each Txn with its node and
// each record with its column family, and the others go on waiting. Each node publishes what
// the others cannot see, on its own etcd lease: the waits of its Txns for records held, or
// asked for first, on other nodes (w/), and, for each record another node's Txn waits for,
// its Txns that hold it with the paths of waits within the node that lead from each to one of
// its cross-node waits (h/). Every node follows both through the watch it already has, and
// looks for cycles through its own cross-node waits whenever they change. The victim is the
// cross-node wait of the cycle that began last (its key's ModRevision), a rule every node
// applies alike; its node confirms the cycle in one Txn that compares the ModRevision of every
// key the cycle was read from, and only then fails that wait. A wait that ends deletes its key
// first (a wait that ran out, before its Lock returns), so a cycle that went away is never
// confirmed, and a node that dies leaves nothing once its lease has expired. A wait whose lease
// ended while it went on is put again on the node's new lease.
//
// Cost: a lock admitted from a delegation makes no request for detection. A Txn's lock that
// finds the record held elsewhere publishes its wait in the Txn it sends anyway, and deletes it
// in the Txn that creates the record or in one request as it ends; a node holding a record
// another node's Txn waits for sends one Txn when the paths from its holders change, looking
// every 10 ms while it has such holders or waits; a victim costs its node one Txn.
//
// # Layout in etcd
//
// Under the prefix, a record's identity is base64url(column family name) "/" base64url(key):
//
//   - x/ID is the record's exclusive delegation, on its holder's lease. Its value is the
//     holder's name, or the recall value of the call it was handed over to; its ModRevision is
//     the fencing token.
//   - s/ID/LEASE is the shared delegation of the node on etcd lease LEASE (16 hex digits), on
//     that lease; value and token as for x/ID.
//   - r/ID is the one pending recall of the record, on the asker's lease: the asker's name,
//     lease, a number unique to the call and the mode it asks for.
//   - n/NAME registers a node's name on its lease.
//   - w/NAME/TXN and h/ID/NAME are the waits and holdings of deadlock detection, on the
//     lease of the node NAME.
//
// The compares: a cold Txn creates x/ID only if x/ID and every other node's s/ID/ are absent,
// and s/ID/LEASE only if x/ID is absent and its own key is too (a second reader of the node
// must not overwrite the first's grant); either only if r/ID is absent or is the call's own
// (its turn). Otherwise it reads x/ID, s/ID/ and r/ID, and writes r/ID if it is absent and a
// conflicting holder exists. A hand-back compares the delegation key's ModRevision with the
// node's token, so it never deletes a later grant; a hand-over also compares r/ID's value
// with the recall it serves, and a shared holder hands over only if it is the last holder
// (no x/ID, no other s/ID/). The down-conversion compares x/ID's ModRevision, and puts the
// asker's shared key only while its recall is pending and the key absent. A withdrawal
// compares r/ID's value with the call's own, and so does the deletion of a wait with w/NAME/TXN's:
// the Txn's next wait takes the same key.
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
// recordlock.ErrClusterUnavailable, never with a node-local lock. A wait that runs out once
// it has waited for holders of the key, on another node or in this node's own recall of it,
// fails with recordlock.ErrTimeout, whatever request is in flight when it does. A node that
// dies stops blocking others when its etcd lease expires: one TTL (WithTTL, DefaultTTL) after
// its last refresh, and etcd restarts that TTL whenever its leader changes.
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
// and expired delegations, lease refresh failures, watch restarts, retained admissions, and the
// requests sent to etcd, the watch stream aside.
// Failed hand-backs and recall withdrawals, watch restarts and lost delegations are logged
// through WithLogger. Once the etcd client is closed, a failed hand-back is logged once and
// not retried: its keys lapse with the node's lease.
// The package's tests start embedded etcd servers on loopback, so they need no external server;
// they also run the protocol against an in-process simulation of etcd under a seeded scheduler,
// whose seeds replay step for step when the tests are built without -race.
package etcdcoord
