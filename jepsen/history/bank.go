package history

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// The bank workload runs beside the registers: accounts at the resource whose balances add up to
// a fixed total. A transfer locks two accounts exclusive, reads both and writes both at once; a
// read locks every account shared and reads each. Every read that completes must add up to the
// total, and so must the accounts at the end of the run.

// BankKind is what a bank operation does.
type BankKind string

// The kinds of bank operation.
const (
	BankRead BankKind = "read"
	Transfer BankKind = "transfer"
)

// BankEvent is one line of a node's bank history log: an operation's Invoke, then its Complete
// with what it read.
type BankEvent struct {
	Op     int64    `json:"op"`
	Node   int      `json:"node"`
	Client int      `json:"client"` // the node's client
	Kind   BankKind `json:"kind"`
	Phase  Phase    `json:"phase"` // Invoke or Complete
	Time   int64    `json:"t"`     // Unix nanoseconds
	// Accounts are the accounts the operation read, in the order it read them (a transfer's
	// source first), with the Values it read and the Tokens it read them with.
	Accounts []string `json:"accounts,omitempty"`
	Values   []int64  `json:"values,omitempty"`
	Tokens   []uint64 `json:"tokens,omitempty"`
	Amount   int64    `json:"amount,omitempty"` // what a transfer moved from Accounts[0] to Accounts[1]
	// Unordered is a transfer that locked its source, then its destination, with a Lock each.
	Unordered bool `json:"unordered,omitempty"`
	// Deadlocks counts the times the operation's lock failed with ErrDeadlock and it rolled back
	// and tried again; DeadlocksAcrossNodes those of cycles through other nodes.
	Deadlocks            int     `json:"deadlocks,omitempty"`
	DeadlocksAcrossNodes int     `json:"deadlocks_across_nodes,omitempty"`
	Outcome              Outcome `json:"outcome,omitempty"`
	Cause                string  `json:"cause,omitempty"`
	Error                string  `json:"error,omitempty"`
}

// BankOp is one bank operation assembled from its events. A read is OK when it read every
// account; a transfer is OK when its write was applied, Unknown when it was sent and no answer
// came (or its node was killed after it locked), Fail otherwise.
type BankOp struct {
	ID       int64
	Node     int
	Client   int
	Kind     BankKind
	Call     int64
	Return   int64 // math.MaxInt64 when it never completed
	Accounts []string
	Values   []int64
	Tokens   []uint64
	Amount   int64
	Outcome  Outcome
	Cause    string
	// Unordered, Deadlocks and DeadlocksAcrossNodes are the BankEvent's; an operation whose node
	// was killed before it completed has none.
	Unordered            bool
	Deadlocks            int
	DeadlocksAcrossNodes int
}

// AssembleBank builds the bank operations of a run from its events, in the order of their calls.
// An operation with no Complete event (its node was killed) is a failed read, which had no effect,
// or an Unknown transfer, whose write may have been sent.
func AssembleBank(events []BankEvent) ([]BankOp, error) {
	byID := make(map[int64]*BankOp)
	var order []int64
	for _, e := range events {
		op, ok := byID[e.Op]
		switch {
		case e.Phase == Invoke && ok:
			return nil, fmt.Errorf("history: bank op %d invoked twice", e.Op)
		case e.Phase == Invoke:
			byID[e.Op] = &BankOp{ID: e.Op, Node: e.Node, Client: e.Client, Kind: e.Kind, Call: e.Time, Return: math.MaxInt64}
			order = append(order, e.Op)
		case e.Phase != Complete:
			return nil, fmt.Errorf("history: bank op %d: unknown phase %q", e.Op, e.Phase)
		case !ok:
			return nil, fmt.Errorf("history: bank op %d: complete before invoke", e.Op)
		default:
			op.Return, op.Outcome, op.Cause = e.Time, e.Outcome, e.Cause
			op.Accounts, op.Values, op.Tokens, op.Amount = e.Accounts, e.Values, e.Tokens, e.Amount
			op.Unordered, op.Deadlocks, op.DeadlocksAcrossNodes = e.Unordered, e.Deadlocks, e.DeadlocksAcrossNodes
		}
	}
	ops := make([]BankOp, 0, len(order))
	for _, id := range order {
		op := byID[id]
		if op.Return == math.MaxInt64 {
			op.Outcome, op.Cause = Fail, "killed"
			if op.Kind == Transfer {
				op.Outcome = Unknown
			}
		}
		ops = append(ops, *op)
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops, nil
}

// BankResult is what the bank check found in one run.
type BankResult struct {
	Accounts []string `json:"accounts"`
	Total    int64    `json:"total"` // what the accounts add up to at the start
	// Reads and Transfers count the OK operations of each kind.
	Reads            int `json:"reads"`
	ReadsFailed      int `json:"reads_failed"`
	Transfers        int `json:"transfers"`
	TransfersFailed  int `json:"transfers_failed"`
	TransfersUnknown int `json:"transfers_unknown"`
	// Unordered counts the transfers (of any outcome) that locked their accounts in the order
	// given, Deadlocks the cycles broken by failing a lock of an operation (which tried again
	// after each), DeadlocksAcrossNodes those through other nodes.
	Unordered            int `json:"unordered_transfers"`
	Deadlocks            int `json:"deadlocks"`
	DeadlocksAcrossNodes int `json:"deadlocks_across_nodes"`
	// Causes counts the failed and unknown operations by kind and cause.
	Causes     map[string]int `json:"causes"`
	FinalTotal int64          `json:"final_total"`
	// Violations counts the OK reads that did not add up to Total, and one more when FinalTotal
	// is not Total.
	Violations int       `json:"violations"`
	BadReads   []BadRead `json:"bad_reads,omitempty"`
}

// BadRead is an OK read whose values do not add up to the total.
type BadRead struct {
	Op       int64    `json:"op"`
	Node     int      `json:"node"`
	Client   int      `json:"client"`
	Accounts []string `json:"accounts"`
	Values   []int64  `json:"values"`
	Tokens   []uint64 `json:"tokens"`
	Sum      int64    `json:"sum"`
}

func (b BadRead) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "read %d on node %d (client %d):", b.Op, b.Node, b.Client)
	for i, a := range b.Accounts {
		if i < len(b.Values) && i < len(b.Tokens) {
			fmt.Fprintf(&s, " %s=%d (token %d)", a, b.Values[i], b.Tokens[i])
		}
	}
	fmt.Fprintf(&s, ", sum %d", b.Sum)
	return s.String()
}

// CheckBank counts ops and checks that every OK read of all accounts, and final (every
// account's value at the end), add up to total.
func CheckBank(ops []BankOp, accounts []string, total int64, final map[string]int64) BankResult {
	r := BankResult{Accounts: accounts, Total: total, Causes: make(map[string]int)}
	for _, op := range ops {
		if op.Cause != "" {
			r.Causes[string(op.Kind)+": "+op.Cause]++
		}
		if op.Unordered {
			r.Unordered++
		}
		r.Deadlocks += op.Deadlocks
		r.DeadlocksAcrossNodes += op.DeadlocksAcrossNodes
		switch {
		case op.Kind == BankRead && op.Outcome == OK:
			r.Reads++
			if b := (BadRead{Op: op.ID, Node: op.Node, Client: op.Client, Accounts: op.Accounts,
				Values: op.Values, Tokens: op.Tokens, Sum: sum(op.Values)}); b.Sum != total || !readAll(op, accounts) {
				r.BadReads = append(r.BadReads, b)
			}
		case op.Kind == BankRead:
			r.ReadsFailed++
		case op.Outcome == OK:
			r.Transfers++
		case op.Outcome == Unknown:
			r.TransfersUnknown++
		default:
			r.TransfersFailed++
		}
	}
	r.Violations = len(r.BadReads)
	for _, a := range accounts {
		r.FinalTotal += final[a]
	}
	if r.FinalTotal != total {
		r.Violations++
	}
	return r
}

func sum(vs []int64) int64 {
	var s int64
	for _, v := range vs {
		s += v
	}
	return s
}

// readAll reports whether op read each of accounts once, with a value and a token for each: the
// sum of a read that missed one says nothing.
func readAll(op BankOp, accounts []string) bool {
	if len(op.Accounts) != len(accounts) || len(op.Values) != len(accounts) || len(op.Tokens) != len(accounts) {
		return false
	}
	seen := make(map[string]bool, len(accounts))
	for _, a := range op.Accounts {
		seen[a] = true
	}
	for _, a := range accounts {
		if !seen[a] {
			return false
		}
	}
	return true
}
