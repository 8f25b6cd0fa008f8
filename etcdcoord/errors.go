package etcdcoord

import "errors"

// ErrNameTaken is returned by New, and by Acquire after the node's lease was lost, when
// another live coordinator has registered the same node name.
var ErrNameTaken = errors.New("etcdcoord: the node name is live in the cluster")
