package etcdcoord

import (
	"context"
	"time"

	"github.com/recordlock/recordlock"
)

// step takes one action the seeded choice picks.
func (w *simWorld) step() {
	r := w.rng
	n := w.nodes[r.IntN(len(w.nodes))]
	switch x := r.IntN(100); {
	case x < 18:
		w.lock(n, simKey(r.IntN(simKeys)))
	case x < 26:
		w.release(n)
	case x < 34:
		w.fence(n)
	case x < 36: // commits often outlast their holder's lease
		w.endFence(n)
	case x < 72:
		w.answer()
	case x < 88:
		w.watch()
	default:
		d := []time.Duration{20 * time.Millisecond, 200 * time.Millisecond, 700 * time.Millisecond, 1500 * time.Millisecond}[r.IntN(4)]
		w.logf("clock +%v", d)
		w.clock.Advance(d)
		w.etcd.expire()
	}
}

func (w *simWorld) lock(n *simNode, key string) {
	w.mu.Lock()
	busy := n.locking[key] || w.holding(n, key) != nil
	if !busy {
		n.locking[key] = true
	}
	w.mu.Unlock()
	if busy {
		return
	}
	lease := []time.Duration{300 * time.Millisecond, time.Second, 2 * time.Second, 3500 * time.Millisecond}[w.rng.IntN(4)]
	timeout := []time.Duration{300 * time.Millisecond, 2 * time.Second}[w.rng.IntN(2)]
	w.logf("%s locks %s lease %v timeout %v", n.name, key, lease, timeout)
	w.activity.Add(1)
	w.ops.Go(func() {
		defer w.activity.Add(1)
		h, err := n.l.Lock(context.Background(), []byte(key), recordlock.Options{
			Scope: recordlock.ScopeCluster, Lease: lease, Timeout: timeout})
		w.mu.Lock()
		defer w.mu.Unlock()
		n.locking[key] = false
		if err == nil {
			w.admittedLocked(n, key, h)
		}
	})
}

func (w *simWorld) holding(n *simNode, key string) *simHold {
	for _, h := range n.holds {
		if h.key == key {
			return h
		}
	}
	return nil
}

func (w *simWorld) release(n *simNode) {
	w.mu.Lock()
	var hold *simHold
	for i, h := range n.holds {
		if h.endFence == nil {
			hold = h
			n.holds = append(n.holds[:i], n.holds[i+1:]...)
			break
		}
	}
	w.mu.Unlock()
	if hold == nil {
		return
	}
	w.logf("%s releases %s", n.name, hold.key)
	w.activity.Add(1)
	w.ops.Go(func() { // off the scheduler's goroutine, as a holder of the node releases
		defer w.activity.Add(1)
		hold.h.Release()
	})
}

// fence starts a fenced commit on a holder of n that lasts until endFence ends it.
func (w *simWorld) fence(n *simNode) {
	w.mu.Lock()
	var hold *simHold
	for _, h := range n.holds {
		if h.endFence == nil {
			hold = h
			break
		}
	}
	if hold != nil {
		hold.endFence = make(chan struct{})
	}
	w.mu.Unlock()
	if hold == nil {
		return
	}
	w.logf("%s fences %s", n.name, hold.key)
	end := hold.endFence
	w.activity.Add(1)
	w.ops.Go(func() {
		defer w.activity.Add(1)
		_ = hold.h.Fence(func() error {
			w.mu.Lock()
			hold.fencing = true
			w.mu.Unlock()
			<-end
			w.mu.Lock()
			hold.fencing = false
			w.mu.Unlock()
			return nil
		})
	})
}

func (w *simWorld) endFence(n *simNode) {
	w.mu.Lock()
	var hold *simHold
	for i, h := range n.holds {
		if h.endFence != nil {
			hold = h
			n.holds = append(n.holds[:i], n.holds[i+1:]...)
			break
		}
	}
	w.mu.Unlock()
	if hold == nil {
		return
	}
	w.logf("%s's fenced commit of %s returns, and it releases", n.name, hold.key)
	close(hold.endFence)
	w.activity.Add(1)
	w.ops.Go(func() {
		defer w.activity.Add(1)
		hold.h.Release()
	})
}

// answer has etcd answer one queued request: mostly as asked, sometimes failing it unapplied,
// sometimes applying it and losing the reply.
func (w *simWorld) answer() {
	n := w.etcd.pending()
	if n == 0 {
		return
	}
	i := w.rng.IntN(n)
	applied, replied := true, true
	switch x := w.rng.IntN(20); {
	case x == 0:
		applied, replied = false, false
	case x == 1:
		replied = false
	}
	what := w.etcd.answer(i, applied, replied)
	w.logf("etcd answers %s (applied %v, replied %v)", what, applied, replied)
}

// watch delivers a batch of one watch's events, or breaks or compacts it.
func (w *simWorld) watch() {
	sts := w.etcd.openStreams()
	if len(sts) == 0 {
		return
	}
	st := sts[w.rng.IntN(len(sts))]
	switch x := w.rng.IntN(40); {
	case x == 0:
		w.logf("%s's watch breaks", st.node)
		w.etcd.breakStream(st, false)
	case x == 1:
		w.logf("etcd compacts; %s's watch is compacted", st.node)
		w.etcd.breakStream(st, true)
	default:
		n := 1 + w.rng.IntN(3)
		w.logf("%s's watch gets up to %d events", st.node, n)
		w.etcd.deliver(st, n)
	}
}
