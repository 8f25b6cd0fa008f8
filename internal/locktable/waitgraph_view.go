package locktable

import "bytes"

// WaitOf reports what owner o waits for in the table now: the record its request is for and the
// owners it waits for (blockers), and false when it does not wait. A coordinator follows these
// waits from node to node to find deadlocks that span nodes.
func (tb *Table) WaitOf(o Owner) (Wait, []Owner, bool) {
	g := &tb.graph
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.waiting[keyOf(o)]
	if h == nil {
		return Wait{}, nil, false
	}
	blockers := g.blockers(o, h, nil)
	return Wait{Owner: o, CF: h.cf, Key: bytes.Clone(h.key())}, blockers, true
}

// Owner is the owner h was prepared for, nil for none.
func (h *Claim) Owner() Owner { return h.owner }
