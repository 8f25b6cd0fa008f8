package etcdcoord

import (
	"encoding/base64"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The keys of a record in etcd (doc.go, # Layout in etcd).

func (c *Coordinator) xkey(id string) string { return c.cfg.prefix + "x/" + id }
func (c *Coordinator) rkey(id string) string { return c.cfg.prefix + "r/" + id }
func (c *Coordinator) nkey() string          { return c.cfg.prefix + "n/" + encode(c.node) }

// skey is the key of the shared delegation of record id held on lease.
func (c *Coordinator) skey(id string, lease clientv3.LeaseID) string {
	return c.cfg.prefix + "s/" + id + "/" + fmt.Sprintf("%016x", uint64(lease))
}

// shared is the range [from, to) of every shared delegation key of record id.
func (c *Coordinator) shared(id string) (from, to string) {
	return c.cfg.prefix + "s/" + id + "/", c.cfg.prefix + "s/" + id + "0" // '0' follows '/'
}

// noneIn is a condition that no key in [from, to) exists.
func noneIn(from, to string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(from), "=", 0).WithRange(to)
}

// recordID is a record's identity across the cluster, as it appears in etcd keys: its column
// family's name and its key, each encoded, so that the same key bytes in two column families
// are two records.
func recordID(cf string, key []byte) string { return encode(cf) + "/" + encode(string(key)) }

// encode makes a name safe to put under the prefix: no separator, no prefix of another name.
func encode(k string) string { return base64.RawURLEncoding.EncodeToString([]byte(k)) }
