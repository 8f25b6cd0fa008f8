package locktable

import "github.com/recordlock/recordlock/internal/spans"

// rangeTree holds range locks or queued range requests of one column family, ordered by start, as
// a treap whose every node knows the largest end in its subtree (internal/spans). That is what
// finds the ranges that meet a key or a span in O(log R + m) for m found, where a tree ordered by
// start alone would step over every range that starts before the span and ends before it too; the
// ordered containers we could take (google/btree, tidwall/btree) keep no such per-subtree value.
type rangeTree = spans.Tree[*Claim]

// rangeItem is a range claim's node in its column family's trees, held or queued. It is part of
// every range lock, so it keeps no copy of a key: its node points at the claim's span, whose start
// is the claim's key, and the node's value is the claim. The span, this item included, fits the
// 112-byte size class, and each version of the cover points at the same span from a 48-byte node:
// a start kept in the nodes, or a tree pointer here beside the claim, would take a range lock past
// the 384 bytes TestHeldLockMemory allows it.
type rangeItem struct {
	// Node is its place in a tree: its value is its claim, and its id a number of nextSeq, unique
	// in the column family, which orders the items of one start.
	spans.Node[*Claim]
	// w is the queued request, nil once granted; its seq is the request's place in the column
	// family's order of arrival.
	w        *waiter
	in       inTree // the tree of its rangeSet it is in
	covering bool   // its span is in its space's live cover (rangecover.go)
}

// itemOf is h's item, h being a range claim.
func itemOf(h *Claim) *rangeItem { return &h.cold.span.item }

// ready readies it, which is in no tree, to go in one as the span of h numbered id.
func (it *rangeItem) ready(h *Claim, id uint64) { it.Init(h, &h.cold.span.Span, id) }

func (it *rangeItem) span() *spans.Span { return &it.Value.cold.span.Span }
func (it *rangeItem) start() []byte     { return it.Value.key() }
func (it *rangeItem) end() []byte       { return it.Value.cold.span.End }
