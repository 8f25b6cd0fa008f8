//go:build invariants

package invariants

// Enabled is true in a build with the tag invariants.
const Enabled = true

// Counter counts steps, for a test that bounds a cost; its owner's lock guards it.
type Counter struct{ n uint64 }

// Add counts n steps.
func (c *Counter) Add(n uint64) { c.n += n }

// Inc counts one step.
func (c *Counter) Inc() { c.n++ }

// Load is the steps counted so far; 0 in a build without the tag.
func (c *Counter) Load() uint64 { return c.n }

// Max keeps the largest of the values it was told, for a test that bounds one; its owner's lock
// guards it.
type Max struct{ n int }

// Note keeps v if it is the largest so far.
func (m *Max) Note(v int) { m.n = max(m.n, v) }

// Load is the largest value noted so far; 0 in a build without the tag.
func (m *Max) Load() int { return m.n }
