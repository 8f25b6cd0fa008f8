package locktable

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tableEntry makes an entry for key whose hash is hash, as a held key has.
func tableEntry(hash uint64, key string) *keyEntry {
	h := &Claim{}
	h.setKey([]byte(key))
	return &keyEntry{hash: hash, holder: h}
}

// checkTable verifies that every entry of model is found under its key, that nothing else is,
// and that each entry sits in the probe run that starts at its home slot.
func checkTable(t *testing.T, tab *entryTable, model map[string]*keyEntry) {
	t.Helper()
	require.Equal(t, len(model), tab.n)
	// Linear probing needs no empty slot between an entry's home and its slot. run[i] counts the
	// occupied slots ending at i, wrapping around (the load stays below 1, so a run starts at an
	// empty slot): the entry at i is reachable when its distance from home is less than run[i].
	// One pass, rather than a walk from each entry's home, which costs the square of a cluster.
	mask := len(tab.slots) - 1
	empty := slices.Index(tab.slots, nil)
	require.GreaterOrEqual(t, empty, 0, "a table with no empty slot")
	run := make([]int, len(tab.slots))
	stored := 0
	for n := 1; n <= len(tab.slots); n++ {
		i := (empty + n) & mask
		e := tab.slots[i]
		if e == nil {
			continue
		}
		stored++
		run[i] = run[(i-1)&mask] + 1
		if dist := (i - tab.home(e.hash)) & mask; dist >= run[i] {
			t.Fatalf("a gap between %q's home and its slot", e.holder.key())
		}
	}
	require.Equal(t, len(model), stored)
	// Plain comparisons: testify's would cost a reflection per key. A key that is not stored
	// walks the same slots as any other of its hash, so it is looked up once per hash.
	absent := map[uint64]bool{}
	for k, e := range model {
		if got := tab.find(e.hash, 0, []byte(k)); got != e {
			t.Fatalf("key %q: found %p, want %p", k, got, e)
		}
		if absent[e.hash] {
			continue
		}
		absent[e.hash] = true
		if got := tab.find(e.hash, 0, []byte(k+"x")); got != nil {
			t.Fatalf("another key with the hash of %q found %p", k, got)
		}
	}
}

// Random inserts and removes against a map, with hashes drawn from a few values so that keys
// share home slots and whole hashes, which is where linear probing and backward-shift deletion
// can go wrong.
func TestEntryTableAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tab entryTable
	model := map[string]*keyEntry{}
	var keys []string
	largest := 0 // the most slots the table had
	for step := range 20000 {
		// Grow to a few hundred keys, then drain, twice.
		growing := step%10000 < 6000
		if len(keys) > 0 && (!growing || rng.IntN(3) == 0) {
			i := rng.IntN(len(keys))
			k := keys[i]
			keys[i] = keys[len(keys)-1]
			keys = keys[:len(keys)-1]
			require.True(t, tab.remove(model[k]))
			require.False(t, tab.remove(model[k]), "a removed entry is gone")
			delete(model, k)
		} else if growing {
			k := fmt.Sprintf("k%d", step)
			e := tableEntry(uint64(rng.IntN(64))<<hashShift|uint64(rng.IntN(2)), k)
			tab.insert(e)
			model[k] = e
			keys = append(keys, k)
		}
		largest = max(largest, len(tab.slots))
		if step%97 == 0 || len(keys) < 4 {
			checkTable(t, &tab, model)
		}
	}
	checkTable(t, &tab, model)
	assert.Greater(t, largest, minSlots, "the table grew, so it was resized while keys collided")
	require.Empty(t, keys, "the second drain removed every key")
	assert.Len(t, tab.slots, minSlots, "a drained table is back to its idle size")
}

func TestEntryTableGrowsAndShrinks(t *testing.T) {
	var tab entryTable
	assert.Nil(t, tab.find(1, 0, []byte("k")), "an unused table finds nothing")
	assert.False(t, tab.remove(tableEntry(1, "k")))

	var es []*keyEntry
	for i := range 1000 {
		e := tableEntry(uint64(i)<<hashShift, fmt.Sprint(i))
		tab.insert(e)
		es = append(es, e)
		assert.LessOrEqual(t, tab.n*4, len(tab.slots)*3, "the load stays at most 3/4")
	}
	assert.GreaterOrEqual(t, len(tab.slots), 1024)
	for i, e := range es {
		require.True(t, tab.remove(e))
		if tab.n > 0 {
			assert.GreaterOrEqual(t, tab.n*8, len(tab.slots), "after %d removals the load is at least 1/8", i+1)
		}
	}
	assert.Len(t, tab.slots, minSlots, "an emptied table is back to its idle size")
}
