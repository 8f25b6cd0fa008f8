package locktable

// deadlineHeap is a binary min-heap of holds by dueAt, each knowing its index. It is written
// out rather than built on container/heap: an uncontended Lock and Release each touch it once,
// and the interface calls and boxing of container/heap cost as much as the work itself.
type deadlineHeap []*Claim

func (d *deadlineHeap) push(h *Claim) {
	*d = append(*d, h)
	d.up(len(*d)-1, h)
}

// removeAt takes out the hold at index i.
func (d *deadlineHeap) removeAt(i int) {
	old := *d
	n := len(old) - 1
	h := old[i]
	last := old[n]
	old[n] = nil
	*d = old[:n]
	h.heapIdx = -1
	if i == n {
		return
	}
	if !d.down(i, last) {
		d.up(i, last)
	}
}

// up places h, due to go at index i or above it, moving its ancestors down.
func (d deadlineHeap) up(i int, h *Claim) {
	at := h.dueAt()
	for i > 0 {
		p := (i - 1) / 2
		parent := d[p]
		if parent.dueAt() <= at {
			break
		}
		d[i] = parent
		parent.heapIdx = int32(i)
		i = p
	}
	d[i] = h
	h.heapIdx = int32(i)
}

// down places h, due to go at index i or below it, moving its descendants up. It reports whether
// h moved.
func (d deadlineHeap) down(i int, h *Claim) bool {
	at := h.dueAt()
	start := i
	for {
		c := 2*i + 1
		if c >= len(d) {
			break
		}
		if r := c + 1; r < len(d) && d[r].dueAt() < d[c].dueAt() {
			c = r
		}
		child := d[c]
		if at <= child.dueAt() {
			break
		}
		d[i] = child
		child.heapIdx = int32(i)
		i = c
	}
	d[i] = h
	h.heapIdx = int32(i)
	return i > start
}
