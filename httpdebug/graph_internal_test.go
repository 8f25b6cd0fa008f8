package httpdebug

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock"
)

func lock(key, owner string) recordlock.LockInfo {
	return recordlock.LockInfo{Key: []byte(key), Owner: owner}
}

func wait(key, owner string) recordlock.WaitInfo {
	return recordlock.WaitInfo{Key: []byte(key), Owner: owner}
}

func kinds(g graph) map[string]int {
	n := map[string]int{}
	for _, node := range g.Nodes {
		n[node.Kind]++
	}
	return n
}

// Holders and waiters outside any Txn are nodes of their own, each named by its key, so that
// unrelated plain locks never look like one party; a Txn is one node however many keys it holds.
func TestGraphNodes(t *testing.T) {
	g := buildGraph(
		[]recordlock.LockInfo{lock("a", ""), lock("b", ""), lock("c", "T"), lock("d", "T"), lock("idle", "")},
		[]recordlock.WaitInfo{wait("a", ""), wait("a", ""), wait("b", ""), wait("c", "U"), wait("d", "")},
		nil,
	)
	assert.Equal(t, map[string]int{"holder": 2, "waiter": 4, "txn": 2}, kinds(g), "idle has no waiter and is not drawn")
	require.Len(t, g.Edges, 5, "an edge per wait")
	labels := map[string]int{}
	for _, n := range g.Nodes {
		labels[n.Kind+" "+n.Label]++
	}
	assert.Equal(t, map[string]int{"holder a": 1, "holder b": 1, "waiter a": 2, "waiter b": 1, "waiter d": 1, "txn T": 1, "txn U": 1}, labels)
	assert.Equal(t, "U", g.Nodes[indexOf(t, g, "txn", "U")].Label)
}

// A wait whose key has no listed holder points to a node of the key; a Txn waiting on a key it
// shares draws no edge to itself.
func TestGraphUnlistedHolderAndOwnShare(t *testing.T) {
	g := buildGraph(
		[]recordlock.LockInfo{{Key: []byte("s"), Owner: "T", Shared: true}, {Key: []byte("s"), Owner: "V", Shared: true}},
		[]recordlock.WaitInfo{wait("gone", "U"), {Key: []byte("s"), Owner: "T", Upgrade: true}},
		nil,
	)
	assert.Equal(t, map[string]int{"txn": 3, "key": 1}, kinds(g))
	require.Len(t, g.Edges, 2)
	assert.Equal(t, "Txn U waits for no listed holder on key gone", g.Edges[0].Title)
	assert.Equal(t, "Txn T waits for Txn V on key s", g.Edges[1].Title)
}

// A shared request queued behind an exclusive one waits for that request, not for the holders,
// and its edge says so; an exclusive request waits for the holders whatever is queued ahead of
// it. With no exclusive request ahead, a shared one queued behind an upgrade waits for the
// upgrade.
func TestGraphSharedWaitsForExclusiveAhead(t *testing.T) {
	shared := func(key, owner string) recordlock.WaitInfo {
		return recordlock.WaitInfo{Key: []byte(key), Owner: owner, Shared: true}
	}
	g := buildGraph(
		[]recordlock.LockInfo{lock("k", "H"), {Key: []byte("s"), Owner: "T", Shared: true}, {Key: []byte("s"), Owner: "V", Shared: true}},
		[]recordlock.WaitInfo{
			wait("k", "W"), shared("k", "R"), shared("k", ""), wait("k", "X"), shared("k", "R2"),
			{Key: []byte("s"), Owner: "T", Upgrade: true}, shared("s", "S"),
		},
		nil,
	)
	var titles []string
	for _, e := range g.Edges {
		titles = append(titles, e.Title)
	}
	assert.Equal(t, []string{
		"Txn W waits for Txn H on key k",
		"Txn R waits for Txn W on key k",
		"a Lock outside any Txn waits for Txn W on key k",
		"Txn X waits for Txn H on key k",
		"Txn R2 waits for Txn X on key k",
		"Txn T waits for Txn V on key s",
		"Txn S waits for Txn T on key s",
	}, titles)
	r, w, h := g.Nodes[indexOf(t, g, "txn", "R")], g.Nodes[indexOf(t, g, "txn", "W")], g.Nodes[indexOf(t, g, "txn", "H")]
	assert.Less(t, r.X, w.X, "R, queued behind W, is drawn left of it")
	assert.Less(t, w.X, h.X)
}

// Waiters sit left of what they wait for, layer by layer; a cycle is laid out without looping,
// and no two nodes overlap.
func TestGraphLayout(t *testing.T) {
	g := buildGraph(
		[]recordlock.LockInfo{lock("a", "A"), lock("b", "B"), lock("c", "C"), lock("x", "X"), lock("y", "Y")},
		[]recordlock.WaitInfo{wait("a", "B"), wait("b", "C"), wait("x", "Y"), wait("y", "X")},
		nil,
	)
	a, b, c := g.Nodes[indexOf(t, g, "txn", "A")], g.Nodes[indexOf(t, g, "txn", "B")], g.Nodes[indexOf(t, g, "txn", "C")]
	assert.Less(t, c.X, b.X, "C waits for B")
	assert.Less(t, b.X, a.X, "B waits for A")
	seen := map[[2]int]bool{}
	for _, n := range g.Nodes {
		pos := [2]int{n.X, n.Y}
		assert.False(t, seen[pos], "two nodes at %v", pos)
		seen[pos] = true
		assert.LessOrEqual(t, n.X+nodeWidth, g.Width)
		assert.LessOrEqual(t, n.Y+nodeHeight, g.Height)
	}
	assert.Len(t, g.Edges, 4)
	empty := buildGraph([]recordlock.LockInfo{lock("a", "A")}, nil, nil)
	assert.Empty(t, empty.Nodes, "nothing waits: no graph")
	assert.Zero(t, empty.Width)
}

// Shortened labels keep whole runes and say they were cut.
func TestShorten(t *testing.T) {
	assert.Equal(t, "日本語", shorten("日本語", 3))
	assert.Equal(t, "日…", shorten("日本語", 2))
}

func indexOf(t testing.TB, g graph, kind, label string) int {
	t.Helper()
	for i, n := range g.Nodes {
		if n.Kind == kind && n.Label == label {
			return i
		}
	}
	t.Fatalf("no %s node %q", kind, label)
	return -1
}

// One edge per wait, however many holders its key has: 1,000 sharers of a key and 1,000
// requests queued for it draw 1,000 edges, each to the first sharer with a count of the others,
// not the 1,000,000 of an edge per pair.
func TestGraphOneEdgePerWait(t *testing.T) {
	const sharers, waits = 1000, 1000
	var locks []recordlock.LockInfo
	for i := range sharers {
		locks = append(locks, recordlock.LockInfo{Key: []byte("hot"), Owner: fmt.Sprintf("reader%d", i), Shared: true})
	}
	var ws []recordlock.WaitInfo
	for i := range waits {
		ws = append(ws, wait("hot", fmt.Sprintf("writer%d", i)))
	}
	g := buildGraph(locks, ws, nil)
	require.Len(t, g.Edges, waits)
	assert.Equal(t, "hot +999", g.Edges[0].Label)
	assert.Equal(t, "Txn writer0 waits for Txn reader0 and 999 other holders on key hot", g.Edges[0].Title)
	assert.Equal(t, map[string]int{"txn": waits + 1}, kinds(g), "only the sharer drawn is a node")
}

// The graph names a column family other than the default one by its name and ID, and by its ID
// alone when the page read no name for it.
func TestDescribeKeyNamesTheFamily(t *testing.T) {
	assert.Equal(t, "key k", describeKey(0, "default", "k", false))
	assert.Equal(t, "range [a, b) in column family index (2)", describeKey(2, "index", "[a, b)", true))
	assert.Equal(t, "key k in column family 2 (name unknown)", describeKey(2, "", "k", false))
}
