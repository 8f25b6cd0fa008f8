package locktable

// The holders of a key (docs/DESIGN.md §15.1): one exclusive handle, or any number of shared ones.
// holder is set exactly while the key is held, so a free key is one comparison in either mode. A
// sharer's place is 0 for the holder slot and i+1 for others()[i]; it is kept in the high bits of
// the sharer's state word, so that one share of many is given back in O(1).

const (
	// sharePosShift is where a sharer's place starts in its state word, above the flags.
	sharePosShift = 13
	// sharePosFar is the largest place the state word records; a sharer placed there or further
	// is found by a scan from there, which only a key with half a million sharers would need.
	sharePosFar = 1<<(32-sharePosShift) - 1
	flagBits    = 1<<sharePosShift - 1
)

// sharePos is the place recorded in h's state word.
func (h *Claim) sharePos() int { return int(h.flags() >> sharePosShift) }

// setSharePos records place p in h's state word, with the shard mutex held.
func (h *Claim) setSharePos(p int) {
	p = min(p, sharePosFar)
	h.state.Store(h.flags()&flagBits | uint32(p)<<sharePosShift)
}

// heldExclusively reports whether an exclusive handle holds the key.
func (e *keyEntry) heldExclusively() bool { return e.holder != nil && e.shares == 0 }

// addSharer makes h, whose flags are f, one of the key's sharers, which is free or held shared.
// It returns f with h's place in it, for the caller to store.
func (e *keyEntry) addSharer(h *Claim, f uint32) uint32 {
	p := 0
	if e.holder == nil {
		e.holder = h
	} else {
		if e.sharers == nil {
			e.sharers = new(sharerList)
		}
		e.sharers.claims = append(e.sharers.claims, h)
		p = min(len(e.sharers.claims), sharePosFar)
	}
	e.shares++
	return f&flagBits | uint32(p)<<sharePosShift
}

// placeOf returns h's place among the key's sharers, or -1 when h is not one of them.
func (e *keyEntry) placeOf(h *Claim) int {
	switch p := h.sharePos(); {
	case p == 0:
		if e.holder == h {
			return 0
		}
	case p < sharePosFar:
		if others := e.others(); p <= len(others) && others[p-1] == h {
			return p
		}
	default:
		for i, others := sharePosFar-1, e.others(); i < len(others); i++ {
			if others[i] == h {
				return i + 1
			}
		}
	}
	return -1
}

// removeSharerAt takes h, the key's sharer at place p (placeOf), out of them: the last sharer
// moves into its place, so the holder slot stays filled while any sharer is left. The last share
// to go readies the entry for exclusive use or reuse.
func (e *keyEntry) removeSharerAt(h *Claim, p int) {
	e.shares--
	others := e.others()
	n := len(others)
	if n == 0 {
		e.holder = nil
		e.unwatched = false
		if cap(others) > maxKeptSharers {
			e.sharers = nil
		}
		return
	}
	last := others[n-1]
	others[n-1] = nil
	e.sharers.claims = others[:n-1]
	switch {
	case last == h:
	case p == 0:
		e.holder = last
		last.setSharePos(0)
	default:
		others[p-1] = last
		last.setSharePos(p)
	}
}

// lastSharer is the sharer that giving back a share moves last: the one an exclusive request
// looks at first when it settles lapsed sharers.
func (e *keyEntry) lastSharer() *Claim {
	if others := e.others(); len(others) > 0 {
		return others[len(others)-1]
	}
	return e.holder
}

// appendHolders appends every holder of the key to out.
func (e *keyEntry) appendHolders(out []*Claim) []*Claim {
	if e.holder == nil {
		return out
	}
	out = append(out, e.holder)
	return append(out, e.others()...)
}

// sharerList is the sharers of a key other than its holder, made with its second share and kept
// with the entry (up to maxKeptSharers): held apart, it keeps the entry within 64 bytes.
type sharerList struct{ claims []*Claim }

// others is the sharers of the key other than its holder, each at its place less one.
func (e *keyEntry) others() []*Claim {
	if e.sharers == nil {
		return nil
	}
	return e.sharers.claims
}

// maxKeptSharers bounds the sharers slice an entry keeps for its next sharers once the last
// share of its key is given back.
const maxKeptSharers = 16
