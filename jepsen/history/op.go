package history

import (
	"fmt"
	"math"
	"sort"
)

// Op is one operation assembled from its Events: lock, read the register, write Op.ID, release.
type Op struct {
	ID      int64
	Client  int
	Key     string
	Call    int64 // Unix nanoseconds at invoke
	Return  int64 // Unix nanoseconds at complete; math.MaxInt64 when it never completed
	Read    bool  // a value was read, so the write may have been sent
	Value   int64 // the value read
	Token   uint64
	Outcome Outcome
	Cause   string // why it failed or is unknown, in a few words
}

// Assemble builds the operations of a run from its events. An operation with no Complete event
// (its node was killed) is Unknown if it had read, since its write may have been sent, and Fail
// otherwise.
func Assemble(events []Event) ([]Op, error) {
	byID := make(map[int64]*Op)
	var order []int64
	for _, e := range events {
		op, ok := byID[e.Op]
		switch e.Phase {
		case Invoke:
			if ok {
				return nil, fmt.Errorf("history: op %d invoked twice", e.Op)
			}
			byID[e.Op] = &Op{ID: e.Op, Client: e.Client, Key: e.Key, Call: e.Time, Return: math.MaxInt64, Outcome: Fail}
			order = append(order, e.Op)
			continue
		case Read, Complete:
		default:
			return nil, fmt.Errorf("history: op %d: unknown phase %q", e.Op, e.Phase)
		}
		if !ok {
			return nil, fmt.Errorf("history: op %d: %s before invoke", e.Op, e.Phase)
		}
		if e.Phase == Read {
			op.Read, op.Value, op.Token = true, e.Value, e.Token
			op.Outcome = Unknown
			continue
		}
		op.Return, op.Outcome, op.Cause = e.Time, e.Outcome, e.Cause
	}
	ops := make([]Op, 0, len(order))
	for _, id := range order {
		op := byID[id]
		switch {
		case op.Return != math.MaxInt64:
		case op.Read:
			op.Cause = "killed after its read"
		default:
			op.Outcome, op.Cause = Fail, "killed before its read" // so it sent no write
		}
		ops = append(ops, *op)
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops, nil
}

// Counts is how many operations ended each way.
type Counts struct {
	OK, Fail, Unknown int
	// Causes counts the failed and unknown operations by cause.
	Causes map[string]int
}

// Count tallies ops by outcome.
func Count(ops []Op) Counts {
	c := Counts{Causes: make(map[string]int)}
	for _, op := range ops {
		if op.Cause != "" {
			c.Causes[op.Cause]++
		}
		switch op.Outcome {
		case OK:
			c.OK++
		case Unknown:
			c.Unknown++
		default:
			c.Fail++
		}
	}
	return c
}
