package etcdcoord

import (
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ask is one Acquire call's recall of a record: its value in etcd is unique to the call, so that
// withdrawing it never deletes a later call's recall.
type ask struct {
	k      string // the record's identity (recordID)
	shared bool   // the call asks for a shared delegation
	value  string
	in     bool // the recall key may be in etcd: withdraw it when the call ends
	// contended: the call has waited for holders of the key: etcd answered that another node
	// holds it or is ahead in turn, or the call waited for this node's recall of it to end
	contended bool
}

// recallValue returns the call's recall value, minting it on first use: the node's name, the
// lease a holder may hand the delegation over on, a number unique to the call, and the mode
// asked for ("s" shared, "x" exclusive).
func (c *Coordinator) recallValue(a *ask, sess *session) string {
	if a.value == "" {
		mode := "x"
		if a.shared {
			mode = "s"
		}
		a.value = c.node + "\x00" + strconv.FormatInt(int64(sess.id), 16) + "\x00" +
			strconv.FormatUint(c.seq.Add(1), 36) + "\x00" + mode
	}
	return a.value
}

// recallLease returns the node, the lease and the mode a recall value names.
func recallLease(value string) (node string, lease clientv3.LeaseID, shared, ok bool) {
	parts := strings.Split(value, "\x00")
	if len(parts) != 4 || (parts[3] != "s" && parts[3] != "x") {
		return "", 0, false, false
	}
	id, err := strconv.ParseInt(parts[1], 16, 64)
	return parts[0], clientv3.LeaseID(id), parts[3] == "s", err == nil
}

// mineLocked reports whether a recall value was written by this node on its current lease, or
// a delegation's value names this node and lease. The lease tells apart two coordinators of
// one name, which New refuses but an operator who deletes the prefix, names included, lets in:
// each must see the other's recalls. Called with c.mu held.
func (c *Coordinator) mineLocked(value []byte) bool {
	node, lease, _, ok := recallLease(string(value))
	return ok && node == c.node && c.sess != nil && lease == c.sess.id
}
