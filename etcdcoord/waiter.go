package etcdcoord

import "context"

// waiter is an Acquire call waiting for a change of its key's delegation or recall. It is
// registered before the cold Txn is sent, so that a change the watch reports before the Txn's
// reply arrives is not missed: until the reply gives the revision to wait from, the watch only
// records the latest change it saw. Its fields are guarded by Coordinator.mu.
type waiter struct {
	ch    chan struct{} // closed on a change after from, or when the watch restarts
	from  int64         // wake on a change after this revision; 0 until the reply arrived
	seen  int64         // the latest change seen while from was 0
	fired bool
}

func (w *waiter) fire() {
	if !w.fired {
		w.fired = true
		close(w.ch)
	}
}

// saw records a change of the key at revision rev.
func (w *waiter) saw(rev int64) {
	if w.from == 0 {
		w.seen = max(w.seen, rev)
	} else if rev > w.from {
		w.fire()
	}
}

// wakeAllLocked makes every waiting Acquire call look again. Called with c.mu held.
func (c *Coordinator) wakeAllLocked() {
	for _, ws := range c.waiters {
		for _, w := range ws {
			w.fire()
		}
	}
}

func (c *Coordinator) addWaiter(k string) *waiter {
	w := &waiter{ch: make(chan struct{})}
	c.mu.Lock()
	c.waiters[k] = append(c.waiters[k], w)
	c.mu.Unlock()
	return w
}

func (c *Coordinator) removeWaiter(k string, w *waiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := c.waiters[k]
	for i := range ws {
		if ws[i] == w {
			ws[i] = ws[len(ws)-1]
			ws[len(ws)-1] = nil
			ws = ws[:len(ws)-1]
			break
		}
	}
	if len(ws) == 0 {
		delete(c.waiters, k)
	} else {
		c.waiters[k] = ws
	}
}

// awaitChange waits until the watch reports a change of the key's delegation or recall after
// revision rev, or restarts, unless cw's call is a deadlock's victim first.
func (c *Coordinator) awaitChange(ctx context.Context, w *waiter, rev int64, cw *crossWaiter) error {
	c.mu.Lock()
	if w.seen > rev {
		w.fire()
	}
	w.from = rev
	c.mu.Unlock()
	select {
	case <-w.ch:
		return nil
	case <-cw.victimCh():
		return c.victimErr(cw)
	case <-ctx.Done():
		return waitErr(ctx, "wait for another node to hand the key back")
	case <-c.ctx.Done():
		return errClosed
	}
}
