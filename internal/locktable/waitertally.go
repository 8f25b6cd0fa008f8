package locktable

// waiterTally counts the requests queued over one key set by what decides whether one conflicts
// with a holder of that set (conflicts): its mode, and its owner. Read once for all the holders
// of a key or of a span, it gives each holder its count of conflicting waiters in O(1), where a
// walk of the requests per holder would cost O(s·q) for s holders and q requests. A holder is
// never one of the requests (a claim is either held or queued), so the owner alone excludes a
// request from a holder's count.
type waiterTally struct {
	all, exclusive int
	// owned counts, for each owner of the holders asked about, the requests of that owner: all
	// of them, and the exclusive ones.
	owned map[Owner]*[2]int
}

// newWaiterTally returns an empty tally for the holders hs.
func newWaiterTally(hs []*Claim) waiterTally {
	var t waiterTally
	for _, h := range hs {
		if h.owner == nil {
			continue
		}
		if t.owned == nil {
			t.owned = map[Owner]*[2]int{}
		}
		if t.owned[h.owner] == nil {
			t.owned[h.owner] = &[2]int{}
		}
	}
	return t
}

// add counts x, a request queued over the key set.
func (t *waiterTally) add(x *Claim) {
	exclusive := x.flags()&flagShared == 0
	t.all++
	if exclusive {
		t.exclusive++
	}
	if x.owner == nil {
		return
	}
	if c := t.owned[x.owner]; c != nil {
		c[0]++
		if exclusive {
			c[1]++
		}
	}
}

// conflictingWith is the number of the requests counted that conflict with h, one of the holders
// the tally was made for: those of other owners, all of them for an exclusive h, the exclusive
// ones for a shared h.
func (t *waiterTally) conflictingWith(h *Claim) int {
	mode := 0
	n := t.all
	if h.flags()&flagShared != 0 {
		mode, n = 1, t.exclusive
	}
	if h.owner != nil {
		if c := t.owned[h.owner]; c != nil {
			n -= c[mode]
		}
	}
	return n
}
