package locktable

import "slices"

// The model check's rules (docs/DESIGN.md §15.2): per key a list of holders and a FIFO queue,
// upgrades ahead, served from the head (model_test.go drives them).

// admits is the grant rule for a newcomer (docs/DESIGN.md §15.2), on a settled table.
func (m *modelRun) admits(k int, shared bool) bool {
	if shared {
		return len(m.queues[k]) == 0 && (len(m.holders[k]) == 0 || m.holders[k][0].shared)
	}
	return len(m.holders[k]) == 0 && len(m.queues[k]) == 0
}

// grant makes r, a lock request, a holder of its key now.
func (m *modelRun) grant(r *mReq) {
	m.holders[r.key] = append(m.holders[r.key], &mHold{id: r.id, owner: r.owner, key: r.key, shared: r.shared, deadline: m.now + r.lease, h: r.h})
}

// serve grants what the head of key k's queue can have now.
func (m *modelRun) serve(k int) {
	for len(m.queues[k]) > 0 {
		r := m.queues[k][0]
		switch {
		case r.up != nil:
			if len(m.holders[k]) != 1 {
				return
			}
			r.up.shared = false
		case r.shared:
			if m.heldExclusively(k) {
				return
			}
			m.grant(r)
		default:
			if len(m.holders[k]) > 0 {
				return
			}
			m.grant(r)
		}
		m.queues[k] = m.queues[k][1:]
		m.ended[r] = nil
	}
}

// dequeue takes r out of its queue, ended with err, and serves the key.
func (m *modelRun) dequeue(r *mReq, err error) {
	m.queues[r.key] = slices.DeleteFunc(m.queues[r.key], func(x *mReq) bool { return x == r })
	m.ended[r] = err
	m.serve(r.key)
}

// drop ends hold h (released, revoked or lapsed: expired), fails its upgrade if one waits, and
// serves the key.
func (m *modelRun) drop(h *mHold, expired bool) {
	m.holders[h.key] = slices.DeleteFunc(m.holders[h.key], func(x *mHold) bool { return x == h })
	for _, r := range m.queues[h.key] {
		if r.up == h {
			err := ErrReleased
			if expired {
				err = ErrLeaseExpired
			}
			m.queues[h.key] = slices.DeleteFunc(m.queues[h.key], func(x *mReq) bool { return x == r })
			m.ended[r] = err
			break
		}
	}
	m.serve(h.key)
}

// live lists every hold of the model.
func (m *modelRun) live() []*mHold {
	var hs []*mHold
	for k := range modelKeys {
		hs = append(hs, m.holders[k]...)
	}
	return hs
}
