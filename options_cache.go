package recordlock

import "sync/atomic"

// resolvedCache remembers Options.Resolve's result for the first few distinct valid Options a
// Locker is given, so that a Lock with the same Options does not validate them again: Resolve
// depends on nothing but its input. Entries are immutable and never replaced; Options beyond
// the first few are resolved on every call.
type resolvedCache struct {
	slots [4]atomic.Pointer[resolvedEntry]
}

type resolvedEntry struct {
	opts Options
	r    Resolved
}

// lookup returns the cached resolution of o, or nil. The result must not be modified.
func (c *resolvedCache) lookup(o Options) *Resolved {
	for i := range c.slots {
		e := c.slots[i].Load()
		if e == nil {
			break
		}
		if e.opts == o {
			return &e.r
		}
	}
	return nil
}

func (c *resolvedCache) resolve(o Options) (Resolved, error) {
	if r := c.lookup(o); r != nil {
		return *r, nil
	}
	r, err := o.Resolve()
	if err != nil {
		return r, err
	}
	var fresh *resolvedEntry
	for i := range c.slots {
		e := c.slots[i].Load()
		if e == nil {
			if fresh == nil {
				fresh = &resolvedEntry{opts: o, r: r}
			}
			if c.slots[i].CompareAndSwap(nil, fresh) {
				break
			}
			e = c.slots[i].Load() // another Lock filled the slot first
		}
		if e.opts == o {
			break
		}
	}
	return r, nil
}
