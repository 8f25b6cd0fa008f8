package httpdebug

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/recordlock/recordlock"
)

// graph is the wait-for graph of one database laid out for SVG: a node per owner (a Txn, by
// its name) and, outside any Txn, a node per holder and per waiter, named by its key; one edge
// per wait, labelled with the key. A shared request queued behind an exclusive one waits for that
// request (docs/DESIGN.md §15.5), and its edge goes there, so the graph shows the queue's order.
// Any other wait has one edge to the first holder of the key it waits for and, when the key has
// other holders (sharers), a count of them in the label. So the page grows with holders plus
// waits, never with their product: 1,000 sharers and 1,000 requests queued behind them draw 1,000
// edges, not a million. A wait whose key has no holder listed (the key is being handed over, or
// its holder was left out) points to a node of the key itself. Owners that neither wait nor are
// waited for are not drawn.
//
// The layout is layered: a node that waits for nobody is in layer 0, at the right; a waiter is
// one layer left of the furthest of the nodes it waits for, so edges run left to right except
// in a cycle. Within a layer, nodes are ordered by the mean row of the nodes they wait for.
type graph struct {
	Width, Height         int
	NodeWidth, NodeHeight int
	Nodes                 []graphNode
	Edges                 []graphEdge
}

type graphNode struct {
	X, Y  int
	Label string // name or key, shortened to fit
	Kind  string // "txn", "holder", "waiter" or "key": also the CSS class
	Sub   string // the second line: what the node is
	Title string // the full name or key, and what the node is
	name  string // how an edge's title names the node
	layer int
	row   int
	out   []int // the nodes it waits for
}

type graphEdge struct {
	Path           string // SVG path data
	LabelX, LabelY int
	Label          string // the key, shortened to fit
	Title          string // who waits for whom on which key, in full
}

// Layout, in SVG user units (pixels).
const (
	nodeWidth   = 210
	nodeHeight  = 38
	columnGap   = 130 // room between columns for an edge's label
	rowGap      = 22
	margin      = 16
	labelRunes  = 28 // longest node label shown in full
	edgeRunes   = 18 // longest edge label shown in full
	loopReach   = 70 // how far a backward edge bows out to the right
	parallelGap = 14 // spacing of edges that join the same two nodes
)

// buildGraph draws the wait-for graph of the holders and waits shown for a database; families
// names the column families of the waits (database.families).
func buildGraph(locks []recordlock.LockInfo, waits []recordlock.WaitInfo, families map[uint32]string) graph {
	g := graph{NodeWidth: nodeWidth, NodeHeight: nodeHeight}
	ids := map[string]int{}
	node := func(id string, n graphNode) int {
		if i, ok := ids[id]; ok {
			return i
		}
		ids[id] = len(g.Nodes)
		n.Label, n.Title = shorten(n.Label, labelRunes), shorten(n.Title, titleRunes)
		g.Nodes = append(g.Nodes, n)
		return len(g.Nodes) - 1
	}
	txn := func(owner string) int {
		return node("txn\x00"+owner, graphNode{Label: owner, Kind: "txn", Sub: "Txn", Title: "Txn " + owner, name: "Txn " + owner})
	}

	// The holders, made nodes only once something waits for them.
	holders := newHolderIndex(locks)
	type pending struct {
		from, to  int
		key       string // as keyText gives it
		described string // as describeKey gives it
		others    int    // holders of the key other than the one drawn, that it also waits for
	}
	var edges []pending
	// The nearest exclusive request listed so far for each record: waits come in queue order
	// per record, so it is the one a shared request listed next queued behind.
	exclusiveAhead := map[record]int{}
	for i, w := range waits {
		r, key := waitRecord(w), lockText(w.Key, w.IsRange, w.RangeEnd)
		described := describeKey(w.ColumnFamilyID, families[w.ColumnFamilyID], key, w.IsRange)
		from := 0
		if w.Owner != "" {
			from = txn(w.Owner)
		} else {
			from = node("waiter\x00"+strconv.Itoa(i), graphNode{Label: key, Kind: "waiter", Sub: "waiting, outside any Txn",
				Title: "a Lock outside any Txn, waiting for " + described, name: "a Lock outside any Txn"})
		}
		if !w.Shared {
			exclusiveAhead[r] = from
		} else if ahead, ok := exclusiveAhead[r]; ok {
			if ahead != from {
				edges = append(edges, pending{from, ahead, key, described, 0})
			}
			continue
		}
		first, others := -1, 0
		waitsFor := holders.of(w)
		for _, j := range waitsFor {
			// A Txn upgrading its own share waits for the other sharers only.
			if o := locks[j].Owner; o == "" || w.Owner == "" || o != w.Owner {
				if first < 0 {
					first = j
				} else {
					others++
				}
			}
		}
		if first >= 0 {
			to := 0
			if owner := locks[first].Owner; owner != "" {
				to = txn(owner)
			} else {
				hl := locks[first]
				held := lockText(hl.Key, hl.IsRange, hl.RangeEnd) // a range over the key waited for, or the key
				to = node("holder\x00"+strconv.Itoa(first), graphNode{Label: held, Kind: "holder", Sub: "holding, outside any Txn",
					Title: "a lock outside any Txn, holding " + describeKey(hl.ColumnFamilyID, hl.ColumnFamily, held, hl.IsRange), name: "a lock outside any Txn"})
			}
			edges = append(edges, pending{from, to, key, described, others})
		}
		if len(waitsFor) == 0 {
			to := node(fmt.Sprintf("key\x00%d\x00%q\x00%v\x00%q", r.cf, r.key, r.isRange, r.end), graphNode{Label: key, Kind: "key", Sub: "holder not listed",
				Title: described + ", whose holder is not listed or is being handed over", name: "no listed holder"})
			edges = append(edges, pending{from, to, key, described, 0})
		}
	}
	for _, e := range edges {
		g.Nodes[e.from].out = append(g.Nodes[e.from].out, e.to)
	}
	g.layout()

	parallel := map[[2]int]int{}
	for _, e := range edges {
		pair := [2]int{e.from, e.to}
		g.Edges = append(g.Edges, edgeBetween(g.Nodes[e.from], g.Nodes[e.to], parallel[pair], e.key, e.described, e.others))
		parallel[pair]++
	}
	return g
}

// layout gives every node its layer, row and position, and the graph its size.
func (g *graph) layout() {
	const (
		unvisited = iota
		visiting
		done
	)
	state := make([]int, len(g.Nodes))
	var visit func(i int) int
	visit = func(i int) int {
		switch state[i] {
		case visiting:
			return -1 // a cycle: the edge that closes it is drawn backwards
		case done:
			return g.Nodes[i].layer
		}
		state[i] = visiting
		layer := 0
		for _, j := range g.Nodes[i].out {
			layer = max(layer, visit(j)+1)
		}
		state[i] = done
		g.Nodes[i].layer = layer
		return layer
	}
	layers := 0
	for i := range g.Nodes {
		layers = max(layers, visit(i)+1)
	}

	byLayer := make([][]int, layers)
	for i, n := range g.Nodes {
		byLayer[n.layer] = append(byLayer[n.layer], i)
	}
	rows := 0
	for layer, members := range byLayer {
		// The mean row of a node's targets, already placed in lower layers; layer 0 by name.
		rank := func(i int) float64 {
			sum, n := 0.0, 0
			for _, j := range g.Nodes[i].out {
				if g.Nodes[j].layer < layer {
					sum += float64(g.Nodes[j].row)
					n++
				}
			}
			if n == 0 {
				return 0
			}
			return sum / float64(n)
		}
		slices.SortStableFunc(members, func(a, b int) int {
			return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(g.Nodes[a].Label, g.Nodes[b].Label),
				cmp.Compare(g.Nodes[a].Title, g.Nodes[b].Title))
		})
		for row, i := range members {
			g.Nodes[i].row = row
		}
		rows = max(rows, len(members))
	}
	for layer, members := range byLayer {
		x := margin + (layers-1-layer)*(nodeWidth+columnGap)
		top := margin + (rows-len(members))*(nodeHeight+rowGap)/2 // centre the column
		for row, i := range members {
			g.Nodes[i].X, g.Nodes[i].Y = x, top+row*(nodeHeight+rowGap)
		}
	}
	if layers > 0 {
		g.Width = 2*margin + layers*nodeWidth + (layers-1)*columnGap + loopReach
		g.Height = 2*margin + rows*(nodeHeight+rowGap) - rowGap + parallelGap
	}
}

// edgeBetween draws the k-th edge from a to b as a cubic curve: from a's right side to b's left
// side when b is to the right, else (a cycle) bowing out to the right of both, from side to side.
// key is the key waited for, as keyText gives it, and described as describeKey gives it; others
// counts the key's other holders, which a waits for as well.
func edgeBetween(a, b graphNode, k int, key, described string, others int) graphEdge {
	off := float64(k * parallelGap)
	x0, y0 := float64(a.X+nodeWidth), float64(a.Y+nodeHeight/2)+off
	var x3, y3, x1, x2 float64
	if b.X > a.X {
		x3, y3 = float64(b.X), float64(b.Y+nodeHeight/2)+off
		mid := (x3 - x0) / 2
		x1, x2 = x0+mid, x3-mid
	} else {
		x3, y3 = float64(b.X+nodeWidth), float64(b.Y+nodeHeight/2)+off
		x1, x2 = x0+loopReach+off, x3+loopReach+off
	}
	y1, y2 := y0, y3
	// The curve's midpoint, B(1/2), carries the label.
	lx := (x0 + 3*x1 + 3*x2 + x3) / 8
	ly := (y0 + 3*y1 + 3*y2 + y3) / 8
	label, whom := shorten(key, edgeRunes), b.name
	if others > 0 {
		label = shorten(key, edgeRunes-len(strconv.Itoa(others))-2) + " +" + strconv.Itoa(others)
		whom = fmt.Sprintf("%s and %d other holders", b.name, others)
	}
	return graphEdge{
		Path:   fmt.Sprintf("M%.0f,%.0f C%.0f,%.0f %.0f,%.0f %.0f,%.0f", x0, y0, x1, y1, x2, y2, x3, y3),
		LabelX: int(lx),
		LabelY: int(ly) - 4,
		Label:  label,
		Title:  shorten(a.name+" waits for "+whom+" on "+described, titleRunes),
	}
}

// describeKey names a key, or a range, as lockText gives it, and its column family, whose ID is
// cf and name name, as familyText does, unless it is the default one.
func describeKey(cf uint32, name, key string, isRange bool) string {
	kind := "key"
	if isRange {
		kind = "range"
	}
	if cf == 0 {
		return kind + " " + key
	}
	return kind + " " + key + " in column family " + familyText(cf, name)
}

// shorten cuts s to at most n runes, marking a cut with an ellipsis.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
