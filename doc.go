// Package recordlock provides per-record leased locks for Go code that runs read-modify-write
// transactions on RocksDB.
//
// A [Locker] is made for one *grocksdb.DB. Every Locker made for the same database in a process
// shares one in-memory key-lock table, so they exclude each other; Lockers of different databases
// never interact. Taking or giving back a key writes nothing to RocksDB.
//
//	locker, err := recordlock.New(db)
//	if err != nil { ... }
//	defer locker.Close()
//	h, err := locker.Lock(ctx, []byte("user:42"), recordlock.Options{Lease: 5 * time.Second})
//	if err != nil { ... }           // ErrTimeout, a ctx error, ErrInvalidOptions, ...
//	defer h.Release()
//
// Waiters are served in arrival order, one per release. A newcomer may take a key that was just
// released ahead of the woken waiter, but only while that waiter has waited less than 1 ms.
//
// # Shared locks
//
// A lock is exclusive unless Options.Shared asks for a shared one: any number of shared handles
// may hold a record at once, which suits records a transaction reads and must keep stable but
// does not change (a price, a customer row an order refers to). Each sharer has its own lease,
// Done channel and release hook. A shared request never passes a queued request, so readers do
// not starve a writer; a release grants the writer at the head of the queue alone, or every
// reader up to the next writer together. A Txn writes a record only under an exclusive lock:
// [Txn.Lock] without Shared of a record it holds shared upgrades that same handle, waiting until
// its share is the only one (two Txns that both upgrade one record are a deadlock, reported to
// one of them). [Handle.Fence] on a shared handle is a fenced read: no writer is admitted until
// it returns.
//
// [Txn.SetSavePoint] marks the writes staged so far, and [Txn.RollbackToSavePoint] discards the
// ones staged since the most recent mark; the Txn keeps its locks.
//
// [Txn.Scan] reads the keys of a [Range] (or of a [Prefix]) in order, with the Txn's staged writes
// merged over the database's latest values, as [Txn.Get] reads one key.
//
// # Range locks
//
// A lock of one record cannot keep a record that does not exist yet from being inserted. A range
// lock ([Locker.LockRange], [Txn.LockRange]) locks every key of a [Range], present or not: it
// conflicts with each lock of a key or range that shares a key with it, unless both are shared.
// A Txn that holds a shared or exclusive range lock, scans the range and commits has read exactly
// the keys the range holds when its commit lands: no phantom. Inside a Txn the keys of its range
// need no locks of their own: [Txn.Lock] of one returns the range's handle when the range's mode
// serves the request (an exclusive range serves both modes, a shared one shared requests), and
// Put and Delete of one are protected by an exclusive range. A range lock is a [Handle] like any
// other (lease, Hold, Fence, Done, deadlock detection) and is node-scoped.
//
// # Leases
//
// Every lock is a lease. Its deadline runs on the monotonic reading of the Locker's [Clock], so a
// wall-clock step in either direction can neither extend nor shorten it. At the deadline the key
// goes back to the table and the next waiter proceeds, even if the holder is stalled and never
// calls anything again; [Handle.Done] is closed at that moment. The checks do not trust a timer
// to have run: [Handle.IsExpired] compares against the deadline itself and, finding it passed,
// completes the expiry before it answers.
//
// Two predicates answer different questions. IsExpired: may this handle authorize a new write now?
// It is true after Release, revocation or the deadline. IsLeaseExpired: has the lease ended? A
// deliberate Release alone does not make it true, so a write staged before Release may still be
// committed until the deadline. Once the deadline passes, both are true for good.
//
// # Fencing
//
// A lock is only as good as the writes it guards. [Handle.Fence] runs a commit only while the
// lease is live, and keeps the key from passing to a successor until the commit returns, so on one
// node a fenced write and its successor's writes are strictly ordered. A holder that stalled past
// its lease gets [ErrLeaseExpired] instead of overwriting its successor's work.
// [Handle.RevokeLease] ends authority early, even after Release, so that a write staged before the
// release is fenced too.
//
// # Multi-record transactions
//
// A [Txn] that locks several records (a transfer's two accounts, a row and its index entries)
// must not wait in a cycle with another Txn that locks them in the opposite order. Either lock
// in order, or lock as you go and retry:
//
//   - [Txn.LockAll] takes all its keys in bytewise order, so Txns that use it never wait for
//     each other in a cycle. Its Options.Timeout bounds the whole call, and it is all or nothing:
//     on failure it releases the locks it took and keeps the ones the Txn held before unchanged;
//     on success every handle it returns is live.
//   - When a Txn's Lock would wait for a record held by a Txn that, directly or through others,
//     waits for it, the Lock fails at once with an error matching [ErrDeadlock] (a
//     [*DeadlockError] naming the cycle) and keeps the Txn's other locks. Roll back and retry
//     after a short random pause, so that the Txns of the cycle do not start again in step.
//     With cluster scope, a coordinator that detects deadlocks across nodes (etcdcoord does)
//     also breaks cycles through other nodes' Txns: one request of such a cycle fails the same
//     way soon after the cycle forms, and its [DeadlockWait]s name each Txn's node. A Lock asks
//     the coordinator with the Txn's [TxnRef] and the node's [LocalWaits], which is what such
//     a coordinator follows.
//
// A write to a record the Txn did not lock fails with [ErrNotLocked], unless the Txn was begun
// with [TxnOptions].AllowUnlockedWrites. A record is a key in a column family: the methods ending
// in CF take a column family handle, the same key in two families is two records, and one Commit
// writes any mix of families as one atomic RocksDB WriteBatch. TxnOptions.Sync makes that write
// a synced one, which survives a machine crash once Commit returned; TxnOptions.DisableWAL skips
// the write-ahead log. Commit checks every lock the Txn still holds, shared ones included, so a
// read-only Txn learns from it whether what it read stayed protected to the end.
//
// A Txn that runs longer than its leases renews them with [Handle.Renew], which sets the lease to
// run the given time from now and changes nothing else: the lock still ends with the Txn.
// [Handle.UpgradeToHold] sets the lease the same way, but makes the lock outlive the Txn.
//
// # Cluster scope
//
// With a [Coordinator] (see SetCoordinator and WithCoordinator), a lock of default or cluster
// scope first takes the local key, then asks the coordinator for a round with the remaining wait,
// then re-anchors the handle to that round ([Handle.JoinClusterRound]): the lease is measured from
// the instant the round was minted, never extended locally, and the round's release becomes the
// handle's release hook. Cluster scope fails closed: with no coordinator, or after one was removed
// without declaring the database standalone, it returns [ErrClusterUnavailable] rather than a
// node-local lock. Node scope is always local.
//
// # Writing a coordinator
//
// An application that only locks records can skip this section and the next: it passes a
// ready-made coordinator (such as the etcdcoord module's) to [WithCoordinator] and calls none of
// what they describe.
//
// A [Coordinator] grants the cluster-wide half of a lock. For a lock of cluster scope the Locker
// takes the local key, then calls Acquire with a [Request]: the record's column family by name
// and its key (a record's identity across the cluster), its mode, and the lease of the lock's
// Options as [Options.Resolve] fills them in ([Resolved]). It joins the [Round] Acquire returns
// through [Handle.JoinClusterRound]: the handle's lease is then measured from Round.MintedMono,
// its AcquiredAt becomes Round.TsR, Round.Token becomes [Handle.Token], and Round.Release runs
// when the handle is released, lapses or is revoked. A round is never joined for a longer lease
// than the lock asked for. Acquire must be safe for concurrent use, return promptly once its ctx
// is done, and keep Request.Revoke: calling it recalls the admission, which ends the handle's
// lease at once. See the Coordinator example.
//
// The [Request] names the record as the cluster knows it: Request.ColumnFamily is the name of the
// lock's column family ("default" for the plain calls), not its ID, and Request.Key its key;
// Request.Shared is Options.Shared. A Txn that upgrades a cluster-scoped shared lock to exclusive
// calls Acquire again for the same record, with Request.Shared false and Request.Lease what is
// left of the handle's lease, while the handle still holds its shared round: that round is
// released only once the exclusive one is granted (so Acquire must not wait for this node's own
// shared admission of the record), and kept if it is not. The handle then takes the exclusive
// round's Token and Release, and its deadline moves earlier if the round ends sooner, never later.
//
// # Version stamps
//
// A database that stamps each record with a version (for replication or optimistic reads) can
// take the versions from the lock, so that they increase from one holder of a record to the next:
// [Handle.NextHolderVersion] returns the next version and records it, [Handle.HolderVersionCandidate]
// looks ahead without recording (for a write that may still fail), [Handle.NoteHolderVersion]
// records a version once such a write went in, and [Handle.NoteCandidateFloor] raises the floor of
// later versions, as to just above the version a holder finds stored. A holder's first version is
// its AcquiredAt, a [Timestamp] minted when it took the key. See the Handle.NextHolderVersion
// example.
//
// How the table, leases, fencing, fairness and cluster rounds work inside is described in
// docs/DESIGN.md in the repository.
package recordlock
