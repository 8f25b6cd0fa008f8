package etcdcoord

import (
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ask is one Acquire call's recall of a key: its value in etcd is unique to the call, so that
// withdrawing it never deletes a later call's recall.
type ask struct {
	k         string
	value     string
	in        bool // the recall key may be in etcd: withdraw it when the call ends
	contended bool // etcd answered that another node holds the key or is ahead in turn
}

// recallValue returns the call's recall value, minting it on first use: the node's name, the
// lease a holder may hand the delegation over on, and a number unique to the call.
func (c *Coordinator) recallValue(a *ask, sess *session) string {
	if a.value == "" {
		a.value = c.node + "\x00" + strconv.FormatInt(int64(sess.id), 16) + "\x00" + strconv.FormatUint(c.seq.Add(1), 36)
	}
	return a.value
}

// recallLease returns the node and the lease a recall value names.
func recallLease(value string) (string, clientv3.LeaseID, bool) {
	parts := strings.Split(value, "\x00")
	if len(parts) != 3 {
		return "", 0, false
	}
	id, err := strconv.ParseInt(parts[1], 16, 64)
	return parts[0], clientv3.LeaseID(id), err == nil
}

// mineLocked reports whether a recall value was written by this node on its current lease, or
// a delegation's value names this node and lease. The lease tells apart two coordinators of
// one name, which New refuses but an operator who deletes the prefix, names included, lets in:
// each must see the other's recalls. Called with c.mu held.
func (c *Coordinator) mineLocked(value []byte) bool {
	node, lease, ok := recallLease(string(value))
	return ok && node == c.node && c.sess != nil && lease == c.sess.id
}
