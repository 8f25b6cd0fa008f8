package locktable

import "sync/atomic"

// The shard a claim is in, and taking its mutex. A claim's record is placed by its hash, which
// changes only when a range brings it into its home shard (rangeadopt.go), with the mutexes of
// both shards held; so a path takes the mutex of the shard the hash names, then checks the hash again.

func (h *Claim) shard() *shard { return h.ten.tab.shard(h.hashNow()) }

func (h *Claim) hashNow() uint64 { return atomic.LoadUint64(&h.hash) }

// lockShard takes the mutex of h's shard and returns the shard. The record moves to another shard
// only with the mutexes of both shards held (rangeadopt.go), so once the mutex of the shard h names is held, h
// stays there until it is released.
func (h *Claim) lockShard() *shard {
	hash := h.hashNow()
	sh := h.ten.tab.shard(hash)
	sh.mu.Lock()
	if h.hash != hash {
		return h.relockShard(sh)
	}
	return sh
}

// relockShard, entered with sh's mutex held, follows the move of h's record from sh to its new
// shard, and returns that shard with its mutex held.
func (h *Claim) relockShard(sh *shard) *shard {
	for {
		sh.mu.Unlock()
		sh = h.shard()
		sh.mu.Lock()
		if h.shard() == sh {
			return sh
		}
	}
}
