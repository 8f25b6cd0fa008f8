package recordlock

import (
	"sync/atomic"

	"github.com/recordlock/recordlock/internal/locktable"
)

// resolvedCache remembers Options.Resolve's result for the first few distinct valid Options a
// Locker is given, so that a Lock with the same Options does not validate them again: Resolve
// depends on nothing but its input. Entries are immutable and never replaced; Options beyond
// the first few are resolved on every call.
type resolvedCache struct {
	slots [4]atomic.Pointer[resolvedEntry]
}

// resolvedEntry is one cached resolution, with what a handle locked with it asks the table for.
type resolvedEntry struct {
	opts Options
	r    Resolved
	ask  locktable.Ask
}

// newResolvedEntry returns the entry of options o resolved as r.
func newResolvedEntry(o Options, r Resolved) resolvedEntry {
	var a locktable.Ask
	if r.Hold {
		a |= locktable.AskHold
	}
	if r.Shared {
		a |= locktable.AskShared
	}
	return resolvedEntry{opts: o, r: r, ask: a}
}

// lookup returns the cached resolution of o, or nil. The result must not be modified.
func (c *resolvedCache) lookup(o *Options) *resolvedEntry {
	for i := range c.slots {
		e := c.slots[i].Load()
		if e == nil {
			break
		}
		if e.opts == *o {
			return e
		}
	}
	return nil
}

func (c *resolvedCache) resolve(o Options) (Resolved, error) {
	if e := c.lookup(&o); e != nil {
		return e.r, nil
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
				e := newResolvedEntry(o, r)
				fresh = &e
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
