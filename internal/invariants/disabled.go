//go:build !invariants

package invariants

// Enabled is true in a build with the tag invariants.
const Enabled = false

// Counter counts steps, for a test that bounds a cost; without the tag it is empty and counts
// nothing.
type Counter struct{}

// Add counts n steps.
func (*Counter) Add(uint64) {}

// Inc counts one step.
func (*Counter) Inc() {}

// Load is the steps counted so far; 0 in a build without the tag.
func (*Counter) Load() uint64 { return 0 }

// Max keeps the largest of the values it was told; without the tag it is empty and keeps nothing.
type Max struct{}

// Note keeps v if it is the largest so far.
func (*Max) Note(int) {}

// Load is the largest value noted so far; 0 in a build without the tag.
func (*Max) Load() int { return 0 }
