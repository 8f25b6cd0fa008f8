package history_test

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/recordlock/recordlock/jepsen/history"
)

var accounts = []string{"a0", "a1", "a2"}

// read is an OK read of every account on node 1 that read values with tokens.
func read(id int64, values []int64, tokens []uint64) history.BankOp {
	return history.BankOp{ID: id, Node: 1, Client: 2, Kind: history.BankRead, Accounts: accounts,
		Values: values, Tokens: tokens, Outcome: history.OK}
}

func TestCheckBank(t *testing.T) {
	final := map[string]int64{"a0": 100, "a1": 150, "a2": 50}
	transfer := history.BankOp{ID: 9, Kind: history.Transfer, Outcome: history.OK}
	failedRead := read(10, []int64{0, 0}, []uint64{4, 4})
	failedRead.Outcome, failedRead.Cause = history.Fail, "read refused: stale token"
	unknown := history.BankOp{ID: 11, Kind: history.Transfer, Outcome: history.Unknown, Cause: "write unanswered",
		Unordered: true, Deadlocks: 2, DeadlocksAcrossNodes: 1}
	failedRead.Deadlocks, failedRead.DeadlocksAcrossNodes = 1, 1
	transfer.Deadlocks = 3 // within its node
	ops := []history.BankOp{
		read(1, []int64{100, 100, 100}, []uint64{3, 3, 3}),
		transfer, failedRead, unknown,
		read(2, []int64{100, 150, 50}, []uint64{5, 6, 7}),
	}
	r := history.CheckBank(ops, accounts, 300, final)
	assert.Equal(t, 2, r.Reads)
	assert.Equal(t, 1, r.ReadsFailed, "a failed read is not checked: its values say nothing")
	assert.Equal(t, 1, r.Transfers)
	assert.Equal(t, 1, r.TransfersUnknown)
	assert.Equal(t, map[string]int{"read: read refused: stale token": 1, "transfer: write unanswered": 1}, r.Causes)
	assert.Equal(t, 1, r.Unordered)
	assert.Equal(t, 6, r.Deadlocks, "every operation's, whatever its outcome")
	assert.Equal(t, 2, r.DeadlocksAcrossNodes)
	assert.Equal(t, int64(300), r.FinalTotal)
	assert.Zero(t, r.Violations)
	assert.Empty(t, r.BadReads)

	// A read that saw a transfer's debit and not its credit.
	ops = append(ops, read(3, []int64{90, 150, 50}, []uint64{8, 8, 9}))
	r = history.CheckBank(ops, accounts, 300, final)
	assert.Equal(t, 1, r.Violations)
	require.Len(t, r.BadReads, 1)
	assert.Equal(t, history.BadRead{Op: 3, Node: 1, Client: 2, Accounts: accounts,
		Values: []int64{90, 150, 50}, Tokens: []uint64{8, 8, 9}, Sum: 290}, r.BadReads[0])
	assert.Equal(t, "read 3 on node 1 (client 2): a0=90 (token 8) a1=150 (token 8) a2=50 (token 9), sum 290", r.BadReads[0].String())

	// Money made or lost for good.
	r = history.CheckBank(ops[:1], accounts, 300, map[string]int64{"a0": 100, "a1": 150, "a2": 60})
	assert.Equal(t, int64(310), r.FinalTotal)
	assert.Equal(t, 1, r.Violations)
	assert.Empty(t, r.BadReads)

	// An OK read that did not read every account is no read of the total.
	short := read(4, []int64{300, 0}, []uint64{1, 1})
	short.Accounts = accounts[:2]
	r = history.CheckBank([]history.BankOp{short}, accounts, 300, final)
	assert.Equal(t, 1, r.Violations)
}

func TestAssembleBankKilledOperations(t *testing.T) {
	events := []history.BankEvent{
		{Op: 1, Node: 0, Kind: history.BankRead, Phase: history.Invoke, Time: 1},
		{Op: 2, Node: 1, Kind: history.Transfer, Phase: history.Invoke, Time: 2},
		{Op: 3, Node: 2, Client: 1, Kind: history.BankRead, Phase: history.Invoke, Time: 3},
		{Op: 3, Node: 2, Kind: history.BankRead, Phase: history.Complete, Time: 4, Outcome: history.OK,
			Accounts: accounts, Values: []int64{1, 2, 3}, Tokens: []uint64{7, 7, 7}, Deadlocks: 2, DeadlocksAcrossNodes: 1},
		{Op: 4, Node: 2, Kind: history.Transfer, Phase: history.Invoke, Time: 5},
		{Op: 4, Node: 2, Kind: history.Transfer, Phase: history.Complete, Time: 6, Outcome: history.OK, Unordered: true},
	}
	ops, err := history.AssembleBank(events)
	require.NoError(t, err)
	require.Len(t, ops, 4)
	assert.Equal(t, history.Fail, ops[0].Outcome, "a killed read had no effect")
	assert.Equal(t, history.Unknown, ops[1].Outcome, "a killed transfer may have written")
	assert.Equal(t, int64(math.MaxInt64), ops[1].Return)
	assert.Equal(t, history.BankOp{ID: 3, Node: 2, Client: 1, Kind: history.BankRead, Call: 3, Return: 4,
		Accounts: accounts, Values: []int64{1, 2, 3}, Tokens: []uint64{7, 7, 7}, Outcome: history.OK,
		Deadlocks: 2, DeadlocksAcrossNodes: 1}, ops[2])
	assert.True(t, ops[3].Unordered)

	_, err = history.AssembleBank([]history.BankEvent{{Op: 1, Phase: history.Complete}})
	require.Error(t, err)
	_, err = history.AssembleBank([]history.BankEvent{{Op: 1, Phase: history.Invoke}, {Op: 1, Phase: history.Invoke}})
	require.Error(t, err)

	got, err := history.ReadBankEvents(strings.NewReader(`{"op":3,"node":2,"client":1,"kind":"read","phase":"invoke","t":3}` + "\n" + `{"op":3,"no`))
	require.NoError(t, err, "a last line cut by a kill is dropped")
	assert.Equal(t, events[2:3], got)
}
